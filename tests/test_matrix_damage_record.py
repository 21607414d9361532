"""memory.matrix_damage: the shared record of the vector matrix's damage counts every rebuild
when several processes meet damage at once (each read-add-write holds a lock)."""

import multiprocessing

from memory import matrix_damage

PROCESSES, EACH = 4, 40


def _meet_damage(folder) -> None:
    for n in range(EACH):
        matrix_damage.record(folder, f"cut {n}", f"2026-12-07T21:00:{n:02d}Z")


def test_processes_meeting_damage_at_once_count_every_rebuild(tmp_path):
    folder = tmp_path / "vectors"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_meet_damage, args=(folder,)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    shared = matrix_damage.read(folder)
    assert shared["rebuilds"] == PROCESSES * EACH
    assert shared["lastDamage"].startswith("cut ")
