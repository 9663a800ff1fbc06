"""The stores of seed 002's benchmark (GridFS, PostgreSQL, files) and the
files written into them."""
