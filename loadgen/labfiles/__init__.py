"""What the seed and bench must read alike, in one home: which files the lab
holds (sizes.py: FILE_SIZES and FILE_SET) and how PostgreSQL lays files out
(postgres_layout.py). Pure: no driver is imported, so bench's settings check
reads a value as the seed will, before any database is up."""
