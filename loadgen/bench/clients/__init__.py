"""The load generators (ab, wrk, vegeta and bench's own fetch client): running
them with a deadline, and pure parsers of what they print."""
