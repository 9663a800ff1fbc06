"""Seed 000's published figures (EC2 m1.medium, Ubuntu 12.04, 2013; MongoDB
of that time, nginx-gridfs on the legacy C driver, Flask+pymongo 2.6+gevent,
Node 0.10+mongodb 1.3): ab "Time per request" in ms, mean across all
concurrent requests. Its README says `ab -c 100 -n 500`; its scripts ran -c 5.
Named "study", not "seed": seed 000 is one of the earlier studies
(../shared/seeds/000_*), and here "seed" is the loader and the schedule's
random seed."""

# serving path in this lab -> the column of seed 000's table
COLUMNS = {
    "nginx-static": "Nginx+Hard drive",
    "nginx-gridfs": "Nginx+GridFS plugin",
    "flask": "Python(pymongo+gevent)",
    "node": "Node.js",
}

TIME_PER_REQUEST_MS = {
    "1KB": {"nginx-static": 0.174, "nginx-gridfs": 1.124, "flask": 1.982, "node": 1.679},
    "100KB": {"nginx-static": 1.014, "nginx-gridfs": 1.572, "flask": 3.103, "node": 3.708},
    "1MB": {"nginx-static": 9.582, "nginx-gridfs": 9.567, "flask": 15.973, "node": 18.317},
}


def time_per_request_ms(target: str, file: str) -> float | None:
    """Seed 000's figure for a target and a seeded file name like '1KB.bin'."""
    return TIME_PER_REQUEST_MS.get(file.removesuffix(".bin"), {}).get(target)
