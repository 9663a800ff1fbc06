"""Where bench writes a run: a new directory each time, `latest` moved to
it, and a clear error, naming the setting, when bench (not root) cannot
write where it must."""
import os

from bench.run_dir import RESULTS_NOT_WRITABLE, VOLUME_NOT_WRITABLE, new_run_dir, not_writable, point_latest


def test_a_run_never_reuses_a_directory_and_latest_follows(tmp_path):
    first, second = new_run_dir(tmp_path), new_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    point_latest(tmp_path, first)
    point_latest(tmp_path, second)
    assert os.readlink(tmp_path / "latest") == second.name


def test_a_directory_bench_can_write_is_no_problem_and_leaves_nothing(tmp_path):
    assert not_writable(tmp_path, RESULTS_NOT_WRITABLE) is None
    assert list(tmp_path.iterdir()) == []


def test_what_bench_cannot_write_is_named_with_its_setting_or_volume(tmp_path):
    # (a missing directory: as root, the tests' user, a mode cannot stop it)
    results = not_writable(tmp_path / "gone", RESULTS_NOT_WRITABLE)
    assert f"{tmp_path / 'gone'} (RESULTS_DIR, mounted) is not writable by uid {os.getuid()}:{os.getgid()}" in results
    assert "RESULTS_OWNER=$(id -u):$(id -g)" in results and results.endswith("(No such file or directory)")
    volume = not_writable(tmp_path / "gone", VOLUME_NOT_WRITABLE, volume="writes")
    assert "(the writes volume)" in volume and "docker volume rm <project>_writes" in volume
