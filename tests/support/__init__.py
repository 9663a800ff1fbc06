"""The harness the tests share, not tests themselves: real servers started
natively (processes, service_processes, nginx_gridfs_build, netns_hosts),
Docker helpers, the kept runs the docs cite (kept_runs), the browser check,
and the measurement scripts the docs cite (refusal_cost, node_cpu_profile,
perf_profile). Imported as `support.X`: tests/ is on sys.path (pytest's
rootdir conftest)."""
