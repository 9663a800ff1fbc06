"""Before timing: every path answers, serves the right bytes, and speaks HTTP
as nginx does."""
