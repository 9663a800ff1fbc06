"""bench: verifies each serving path of the GridFS Serving Lab, times it with
ab, and writes results/<run-id>/ (raw outputs, results.json, report.md)."""
