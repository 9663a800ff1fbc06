"""What the seed and bench must read alike, in one home: which files the lab
holds (sizes.py: FILE_SIZES and FILE_SET), how PostgreSQL lays files out
(postgres_layout.py), and the GridFS documents that break GridFS's rules,
which the seed writes and bench's conformance suite asks for
(bad_documents.py). Pure: no driver is imported, so bench's settings check
reads a value as the seed will, before any database is up."""
