"""Negative control: the conformance suite fails each deliberately broken backend of
``tests/broken_backends`` in exactly the expected tests, with a message that says what is wrong
(a suite that cannot fail proves nothing). Each run selects only the levels concerned."""
from __future__ import annotations

import pytest

from conformance_command import SuiteRun, run_suite
from statekit.conformance_tests.snapshot_support import SNAPSHOT_MODES


def assert_fails_exactly(run: SuiteRun, expected: dict[str, tuple[str, ...]], levels: str) -> None:
    """``expected``: failing test -> texts its failure message contains."""
    assert run.returncode == 1, f"the suite did not fail (exit code {run.returncode}):\n{run.output[-3000:]}"
    assert set(run.failures) == set(expected), (
        f"unexpected failures: {sorted(set(run.failures) - set(expected))}; "
        f"expected but not failed: {sorted(set(expected) - set(run.failures))}\n{run.output[-3000:]}")
    for test, texts in expected.items():
        for text in texts:
            assert text in run.failures[test], f"{test} failed with: {run.failures[test]}"
    assert f"statekit conformance: FAILED in {levels}" in run.output, run.output[-3000:]


def every_mode(test: str, *texts: str) -> dict[str, tuple[str, ...]]:
    """``test`` (with a ``{mode}`` placeholder) with full, incremental and native snapshots (the
    broken backends are the heap's, which declares all three)."""
    return {test.format(mode=mode): texts for mode in SNAPSHOT_MODES}


def test_dropped_writes_after_a_snapshot_fail_the_snapshot_and_incremental_levels(tmp_path):
    run = run_suite(tmp_path, "--backend", "broken_backends.lost_writes:LostWritesBackend",
                    "--level", "snapshots", "--level", "incremental")
    assert_fails_exactly(run, {
        **every_mode("TestSnapshots::test_overlapping_snapshots_each_see_their_own_point[{mode}]",
                     "snapshot two does not hold its own point in time: 250 of 750 keys missing"),
        "TestSnapshots::test_chain_of_completed_checkpoints_restores_every_key":
            ("state restored from checkpoint 2:", "keys with other state"),
        "TestSnapshots::test_namespaced_cells_of_every_kind_through_a_chain":
            ("restored from checkpoint 2",),
        "TestSnapshots::test_aborted_checkpoint_changes_reach_the_next_one":
            ("changes of an aborted checkpoint were lost:",),
        "TestSnapshots::test_pending_checkpoint_not_yet_confirmed": ("checkpoint 3, taken while 2 was pending:",),
        "TestSnapshots::test_rescale_from_an_incremental_chain":
            ("state of 3 subtasks restored from an incremental chain:",),
        "TestSnapshots::test_an_incremental_checkpoint_after_a_full_one_survives_retention":
            ("state restored from incremental checkpoint 3",),
        "TestSnapshots::test_a_late_completion_of_an_older_checkpoint_is_ignored":
            ("checkpoint 4, after a late confirmation of 2",),
        "TestSnapshots::test_an_incremental_checkpoint_taken_while_a_full_one_is_pending_survives_retention":
            ("incremental checkpoint 3, taken while full 2 was pending",),
        "TestSnapshots::test_a_checkpoint_id_taken_again_after_its_abort_holds_both_attempts_changes":
            ("checkpoint 2 taken again after its abort",),
        **every_mode("TestSnapshots::test_list_cells_spanning_record_batches_restore_whole[{mode}]",
                     "snapshot 2: key 0's list of 65547 elements restored with 65546"),
        **{f"TestSnapshots::test_random_changes_through_a_chain_match_a_model[{seed}]":
           (f"seed {seed}: cells restored from checkpoint",) for seed in range(4)},
    }, "snapshots, incremental")
    assert "TestSnapshots::test_round_trip_every_key_and_value[full]" in run.passed, "a single snapshot is right"


def test_a_snapshot_not_isolated_from_later_writes_fails_the_snapshot_level(tmp_path):
    # the concurrent-write test is left out: whether it catches this bug depends on thread timing
    run = run_suite(tmp_path, "--backend", "broken_backends.leaky_snapshot:LeakySnapshotBackend",
                    "--level", "snapshots", "-k", "not test_write_runs_concurrently_with_processing")
    assert_fails_exactly(run, {
        **every_mode("TestSnapshots::test_writes_after_sync_part_do_not_leak[{mode}]",
                     "writes made after the synchronous part leaked into the snapshot:", "unexpected keys"),
        **every_mode("TestSnapshots::test_overlapping_snapshots_each_see_their_own_point[{mode}]",
                     "snapshot one does not hold its own point in time:"),
        **every_mode("TestSnapshots::test_older_snapshot_written_after_a_newer_one_keeps_its_point[{mode}]",
                     "writes made after a newer snapshot was written reached an older pending one:"),
        # it takes its view when written, so a released one still writes
        **every_mode("TestSnapshots::test_a_pending_snapshot_writes_once[{mode}]",
                     "write() of a released pending snapshot must fail"),
    }, "snapshots")


def test_restoring_the_wrong_key_groups_fails_the_rescale_matrix(tmp_path):
    run = run_suite(tmp_path, "--backend", "broken_backends.wrong_key_groups:FirstHandleOnlyBackend",
                    "--level", "rescale")
    expected: dict[str, tuple[str, ...]] = {}
    for old, new in ((4, 2), (15, 77), (77, 15)):  # a new subtask's range spans several old ones
        expected |= every_mode(f"TestSnapshots::test_rescale_matrix[{old}to{new}-{{mode}}]",
                               f"outputs after rescale {old}->{new}:", "rows missing")
    assert_fails_exactly(run, expected, "rescale")
    assert {f"TestSnapshots::test_rescale_matrix[{ids}-full]" for ids in ("2to4", "2to2")} <= run.passed


@pytest.mark.spark
def test_restoring_the_wrong_key_groups_fails_the_spark_level(tmp_path):
    run = run_suite(tmp_path, "--backend", "broken_backends.wrong_key_groups:FirstHandleOnlyBackend",
                    "--level", "spark", "-k", "test_rescaled_jobs_keep_every_key")
    assert_fails_exactly(run, {"TestSpark::test_rescaled_jobs_keep_every_key": ("outputs of job 'rescale':",
                                                                                 "rows missing")}, "spark")


# ---------------------------------------------------------------------------- broken storages


def test_checkpoints_listed_by_name_fail_the_ordering_test(tmp_path):
    run = run_suite(tmp_path, "--backend", "heap", "--storage", "broken_storages.string_order:StringOrderStorage",
                    "--level", "storage")
    assert_fails_exactly(run, {"TestStorage::test_checkpoints_are_ordered_by_number_not_by_name": (
        "completed() of the access that committed is [1, 10, 100, 101, 11, 12, 2,",
        "puts chk-10 before chk-9")}, "storage")


def test_a_storage_that_ignores_checksums_fails_the_corruption_tests(tmp_path):
    run = run_suite(tmp_path, "--backend", "heap", "--storage",
                    "broken_storages.ignores_checksums:IgnoresChecksumsStorage", "--level", "storage")
    assert_fails_exactly(run, {
        "TestStorage::test_flipped_byte_is_a_checksum_error_naming_the_file":
            ("must verify the checksum the handle records, but it raised no CorruptStateError",),
        "TestStorage::test_truncated_file_is_a_clear_error":
            ("reading a stream cut to half its size must fail", "but it raised no CorruptStateError"),
    }, "storage")
    # the canonical reader checks each key group's checksum too: a whole restore still fails
    assert "TestStorage::test_flipped_byte_fails_a_whole_restore" in run.passed


def test_handles_relative_to_the_wrong_root_fail_resolution_and_shared_files(tmp_path):
    run = run_suite(tmp_path, "--backend", "heap", "--storage", "broken_storages.wrong_root:WrongRootStorage",
                    "--level", "storage")
    shared = ("S1", "must be deleted")
    assert_fails_exactly(run, {
        "TestStorage::test_a_completed_checkpoint_resolves_by_its_pointer":
            ("must not be relative to another root", "cannot read"),
        "TestStorage::test_shared_files_are_deleted_once_unreferenced": shared,
        "TestStorage::test_shared_file_of_a_retained_checkpoint_is_never_deleted": shared,
        "TestStorage::test_registry_is_rebuilt_after_a_restart": shared,
        "TestStorage::test_no_claim_restore_never_deletes_the_restored_files": ("S3",),
        "TestStorage::test_no_claim_restore_of_an_own_checkpoint_outlives_the_coordinator": ("S3 must go",),
        "TestStorage::test_claim_restore_adopts_the_restored_files": ("S2 follows retention",),
        "TestStorage::test_abort_deletes_only_the_aborted_checkpoints_new_shared_files": ("its new shared S2",),
        "TestStorage::test_abort_deletes_the_aborted_checkpoints_shared_files_without_their_handles":
            ("abort(2) left the shared",),
    }, "storage")


@pytest.mark.parametrize("backend", ["FalseTtlBackend", "HiddenTtlBackend"])
def test_a_backend_that_declares_ttl_but_ignores_it_fails_the_whole_ttl_level(tmp_path, backend):
    """HiddenTtlBackend's ``Capabilities.declared()`` leaves out the ``ttl`` its field (what the
    runtime reads) declares: the suite reads the field, so its TTL tests run rather than skip."""
    run = run_suite(tmp_path, "--backend", f"broken_backends.false_ttl:{backend}", "--level", "ttl")
    ttl_tests = {name for name in [*run.failures, *run.passed] if name.startswith("TestTtl::")}
    assert len(ttl_tests) >= 30, run.output[-3000:]
    # a heap snapshot with TTL restored into it is registered without TTL: migrated, which drops the
    # entries expired at the restore (what that test checks), so it alone passes
    migrated = "TestTtl::test_heap_snapshots_restore_with_their_write_times"
    assert migrated in run.passed, run.output[-3000:]
    assert_fails_exactly(run, {name: () for name in ttl_tests - {migrated}}, "ttl")
    assert "an entry written at t is still visible at t + ttl" in \
        run.failures["TestTtl::test_an_entry_is_visible_until_its_ttl_has_passed[value]"]
    assert "expired entries must be left out" in \
        run.failures["TestTtl::test_expired_entries_are_left_out_of_full_snapshots"]


def test_a_backend_whose_timers_are_not_state_fails_the_timers_level(tmp_path):
    """Timers kept beside the state fire right while the backend lives, and are lost by every snapshot."""
    run = run_suite(tmp_path, "--backend", "broken_backends.memory_timers:MemoryTimersBackend", "--level", "timers")
    empty = ("the snapshot of a backend holding timers is empty",)
    assert_fails_exactly(run, {
        "TestTimers::test_a_snapshot_holds_the_timers_of_its_synchronous_part": empty,
        "TestTimers::test_timers_restore_from_a_full_snapshot[checkpoint]": empty,
        "TestTimers::test_timers_restore_from_a_full_snapshot[savepoint]": empty,
        "TestTimers::test_timers_restore_from_an_incremental_chain": empty,
        **every_mode("TestTimers::test_timers_go_with_their_key_groups_on_rescale[{mode}]", *empty),
        **every_mode("TestTimers::test_timers_of_several_subtasks_merge_on_rescale[{mode}]", *empty),
        "TestTimers::test_heap_savepoint_timers_fire_in_this_backend_and_back":
            ("a heap savepoint's timers must fire in this backend",),
        "TestTimers::test_a_timer_job_matches_its_oracle_across_rescales": ("epoch 2 output", "rows missing"),
        "TestTimers::test_pending_timers_survive_a_backend_switch_through_a_savepoint":
            ("after the switch from heap", "rows missing"),
    }, "timers")
    assert "TestTimers::test_timers_fire_in_order_up_to_the_bound" in run.passed, "its queue itself is right"


def test_a_backend_that_drops_what_it_cannot_serialize_fails_the_semantics_level(tmp_path):
    """A value or a key the serializer rejects, swallowed: no error, and the write is lost."""
    run = run_suite(tmp_path, "--backend", "broken_backends.swallowed_serialization:SwallowedSerializationBackend",
                    "--level", "semantics")
    assert_fails_exactly(run, {
        "TestSemantics::test_value_unserializable_value_raises_statekit_error":
            ("update(lock) raised no error and was not kept: value() reads 'old'",),
        "TestSemantics::test_key_that_does_not_serialize_is_a_clear_error_and_leaves_other_keys":
            ("a key that does not serialize raised no error and lost its write: value() reads None",),
    }, "semantics")


def test_a_storage_that_declares_its_files_inline_still_fails_the_corruption_tests(tmp_path):
    """writes_files=False on a storage that writes files would skip every test of stored files."""
    run = run_suite(tmp_path, "--backend", "heap", "--storage",
                    "broken_storages.modest_declarations:InlineClaimingStorage", "--level", "storage")
    inline = ("writes_files=False says the storage keeps every byte inline, but a",)
    assert_fails_exactly(run, {f"TestStorage::{name}": inline for name in (
        "test_flipped_byte_is_a_checksum_error_naming_the_file", "test_flipped_byte_fails_a_whole_restore",
        "test_truncated_file_is_a_clear_error", "test_missing_file_is_a_restore_error_naming_it")}, "storage")


def test_a_storage_that_declares_itself_not_durable_and_without_shared_files_still_fails(tmp_path):
    """durable=False and shared_files=False on a storage that is both would skip the tests it fails."""
    run = run_suite(tmp_path, "--backend", "heap", "--storage",
                    "broken_storages.modest_declarations:NonDurableClaimingStorage", "--level", "storage")
    shared = ("shared_files=False says the storage keeps no shared files, but",)
    assert_fails_exactly(run, {
        **{f"TestStorage::{name}": shared for name in (
            "test_shared_files_are_deleted_once_unreferenced",
            "test_shared_file_of_a_retained_checkpoint_is_never_deleted",
            "test_registry_is_rebuilt_after_a_restart", "test_no_claim_restore_never_deletes_the_restored_files",
            "test_no_claim_restore_of_an_own_checkpoint_outlives_the_coordinator",
            "test_claim_restore_adopts_the_restored_files",
            "test_abort_deletes_only_the_aborted_checkpoints_new_shared_files",
            "test_abort_deletes_the_aborted_checkpoints_shared_files_without_their_handles")},
        "TestStorage::test_committed_checkpoint_is_seen_by_a_new_access":
            ("durable=False says a new access starts empty, but it sees checkpoints [1]",),
    }, "storage")


def test_a_backend_without_ttl_that_accepts_ttl_descriptors_fails_the_semantics_level(tmp_path):
    """Every built-in backend declares ``ttl``, so only a backend that does not runs the rule that
    a TTL descriptor (event-time TTL too) is then refused: here it can fail, and the rest of the
    level still passes."""
    run = run_suite(tmp_path, "--backend", "broken_backends.false_ttl:SilentTtlBackend", "--level", "semantics")
    assert_fails_exactly(run, {f"TestSemantics::test_{ttl}_without_capability_raises[{kind}]": ("CapabilityError",)
                               for ttl in ("ttl", "event_time_ttl")
                               for kind in ("value", "list", "map", "reducing", "aggregating")}, "semantics")


def test_a_local_recovery_that_replays_no_deletes_fails_the_second_resume(tmp_path):
    """Its journal of the cells held at each dispose knows no deletes: one resume is right, a second
    one brings back what was cleared in between."""
    run = run_suite(tmp_path, "--backend", "broken_backends.replay_ignores_deletes:ReplayIgnoresDeletesBackend",
                    "--level", "snapshots")
    assert_fails_exactly(run, every_mode(
        "TestSnapshots::test_cells_cleared_between_two_resumes_stay_cleared[{mode}]",
        "working state reopened by a second local recovery, after cells were cleared:", "100 unexpected keys",
        "200 keys with other state"), "snapshots")
    assert "TestSnapshots::test_working_state_is_reopened_without_reading_storage[full]" in run.passed


@pytest.mark.spark
def test_a_local_recovery_that_replays_no_deletes_fails_the_spark_level(tmp_path):
    run = run_suite(tmp_path, "--backend", "broken_backends.replay_ignores_deletes:ReplayIgnoresDeletesBackend",
                    "--level", "spark", "-k", "test_keys_cleared_in_an_epoch or test_every_epoch_commits")
    assert_fails_exactly(run, {"TestSpark::test_keys_cleared_in_an_epoch_stay_cleared_in_the_next": (
        "outputs of job 'clears':", "rows missing")}, "spark")
    assert "TestSpark::test_every_epoch_commits_a_checkpoint_holding_the_oracle_state[incremental]" in run.passed


def test_a_storage_that_deletes_bytes_another_checkpoint_holds_fails_the_storage_level(tmp_path):
    """Content addressing without reference counts: disposing checkpoint 1 deletes the object that
    retained checkpoint 2, and checkpoint 3 written meanwhile, hold too."""
    run = run_suite(tmp_path, "--backend", "heap", "--storage",
                    "broken_storages.content_addressed:ContentAddressedStorage", "--level", "storage")
    assert_fails_exactly(run, {"TestStorage::test_identical_bytes_outlive_the_checkpoint_that_wrote_them_first": (
        "after dispose(1) and abort(4), the access cannot read checkpoint 2's objects/",
        "bytes another checkpoint holds were deleted")}, "storage")


def test_a_storage_that_never_fsyncs_fails_the_durability_test(tmp_path):
    run = run_suite(tmp_path, "--backend", "heap", "--storage", "broken_storages.careless_commits:UnsyncedStorage",
                    "--level", "storage")
    assert_fails_exactly(run, {"TestStorage::test_files_are_on_the_disk_before_a_handle_or_the_commit_names_them": (
        "a stream's handle may go into a _metadata as soon as it is returned",
        "its bytes were not fsynced after they were written")}, "storage")
    assert "TestStorage::test_a_commit_killed_at_any_point_leaves_no_torn_checkpoint" in run.passed, \
        "its rename is atomic: a killed process leaves no torn _metadata"


def test_a_storage_that_renames_by_copying_fails_the_crash_test(tmp_path):
    run = run_suite(tmp_path, "--backend", "heap", "--storage",
                    "broken_storages.careless_commits:CopyingRenameStorage", "--level", "storage")
    assert_fails_exactly(run, {"TestStorage::test_a_commit_killed_at_any_point_leaves_no_torn_checkpoint": (
        "a commit killed just after chk-7/_metadata was opened for writing",
        "left checkpoint 7 looking complete with 0 bytes of metadata")}, "storage")
    assert "TestStorage::test_files_are_on_the_disk_before_a_handle_or_the_commit_names_them" in run.passed, \
        "it syncs every file and directory"


def test_a_backend_that_does_not_migrate_fails_the_migration_level(tmp_path):
    """It keeps a migrated state's values as the old schema read them: every round trip of the
    level fails (there is no capability to declare instead), the refusals still pass."""
    run = run_suite(tmp_path, "--backend", "broken_backends.no_migration:NoMigrationBackend", "--level", "migration")
    migrations = {name for name in [*run.failures, *run.passed]
                  if "test_every_kind_of_state_is_migrated_on_restore" in name}
    assert len(migrations) == 3, run.output[-3000:]  # full, incremental and native snapshots
    # its canonical snapshots after the registration write values of the old schema with the new
    # serializer (its native snapshot pickles them as they are, and the merge is refused as it should)
    disagreeing = {f"TestMigration::test_snapshots_that_disagree_on_a_migrated_state_are_refused_together[{mode}]"
                   for mode in ("full", "incremental")}
    assert_fails_exactly(run, {**{name: ("the migrated state is",) for name in migrations},
                               **{name: ("field source is missing",) for name in disagreeing}}, "migration")
