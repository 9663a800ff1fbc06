"""tests/support/perf_profile.py on a real `perf report` of the nginx GridFS
module's worker serving 1 MiB files at c=100 (captured here by
tests/test_module_floor_bench.py)."""
from pathlib import Path

from support.perf_profile import OTHER, breakdown, group_of, parse_report

REPORT = (Path(__file__).parent / "fixtures" / "perf" / "nginx-gridfs-1MB-c100.txt").read_text()


def test_every_sample_row_is_read_with_its_object_and_symbol():
    rows = parse_report(REPORT)
    assert sum(n for _, _, n in rows) == 189  # the report's own "Samples: 189"
    assert rows[0] == ("libc.so.6", "__memmove_avx512_unaligned_erms", 27)
    assert ("kernel", "exc_page_fault", 15) in rows
    assert all(obj != "[kernel.kallsyms]" for obj, _, _ in rows)


def test_rows_fall_into_the_groups_that_account_for_a_request():
    groups = breakdown(parse_report(REPORT))
    assert sum(groups.values()) == 189
    assert groups["memcpy and memmove"] == 27
    # clear_page_erms, exc_page_fault, do_anonymous_page...: the windows' pages
    assert groups["kernel: page faults and memory"] >= 40
    assert group_of("kernel", "_copy_to_iter") == "kernel: copies to and from user space"
    assert group_of("kernel", "tcp_sendmsg_locked") == "kernel: TCP/IP, send and receive"
    assert group_of("libbson-1.0.so.0.0.0", "bson_iter_next") == "BSON parsing (libbson)"
    assert group_of("ngx_http_gridfs_module.so", "ngx_http_gridfs_send") == "the module's own code"
    assert group_of("libfoo.so", "bar") == OTHER
