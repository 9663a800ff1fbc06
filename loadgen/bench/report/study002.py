"""Seed 002's published figures ("GridFS vs SQL Server vs Local", 2015:
MongoDB 2.6.7 GridFS, SQL Server Express 2012 through Entity Framework, and
NTFS through .NET's FileInfo, on Windows 7, an Athlon II X2 and a 10,000 rpm
disk; the machine restarted and the stores emptied before each test): 1000
files of 10,000,000 bytes, the mean of 5 runs, in seconds. Its read figures
are only in a picture, not in the text, so none are given here. Named
study002, as study000.py is (seed 002: ../shared/seeds/002_*)."""

FILES, FILE_BYTES = 1000, 10_000_000

# store in this lab -> what seed 002 used for it
STORES = {"gridfs": "GridFS (MongoDB 2.6.7)", "postgres": "SQL Server Express 2012 (BLOBs)",
          "filesystem": "NTFS (FileInfo)"}

# (store, threads) -> seconds to write all the files (20 threads: 50 files each)
WRITE_SECONDS = {
    ("filesystem", 1): 165.338, ("postgres", 1): 998.0, ("gridfs", 1): 921.0,
    ("filesystem", 20): 170.0, ("postgres", 20): 840.0, ("gridfs", 20): 668.0,
}

# store -> disk used for the 10^10 bytes, as it says "GB": Windows' GB, 2^30
# bytes (the files alone are 9.31 of them), so the ratio is to 10^10 / 2^30.
DISK_GIB = {"filesystem": 9.3, "postgres": 9.8, "gridfs": 12.0}


def same_setting(files: int, file_bytes: int) -> bool:
    """Seconds compare only for the same files; rates (MB/s) for any."""
    return (files, file_bytes) == (FILES, FILE_BYTES)


def write_seconds(store: str, threads: int) -> float | None:
    return WRITE_SECONDS.get((store, threads))


def write_mb_per_s(store: str, threads: int) -> float | None:
    seconds = write_seconds(store, threads)
    return FILES * FILE_BYTES / 1e6 / seconds if seconds else None


def disk_ratio(store: str) -> float | None:
    gib = DISK_GIB.get(store)
    return gib * 2 ** 30 / (FILES * FILE_BYTES) if gib else None
