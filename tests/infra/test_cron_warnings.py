"""Synth shows each place a cron.yaml entry deploys with EB's meaning rather than what it seems to say."""

from __future__ import annotations

from aws_cdk.assertions import Annotations

from worker_tier.periodic.cron_config import parse
from worker_tier_cdk.periodic_tasks import CRON_ENTRY_WARNING_ID
from tests.support.synth import synth
from worker_tier.core.settings import Settings

EB_CRON = """\
version: 1
cron:
 - name: "feeds"
   url: "update/feeds"
   schedule: "0 * * * *"
   description: "hourly feeds"
"""


def test_each_entry_warning_is_a_synth_warning_on_the_periodic_tasks(tmp_path):
    # GIVEN an entry with a url without '/' and a key EB ignores (both deploy as EB reads them)
    [entry] = parse(EB_CRON)
    # WHEN the stack is synthesized
    stack, _ = synth(settings=Settings(), cron_entries=[entry], outdir=str(tmp_path))
    # THEN each of the entry's warnings is a warning on PeriodicTasks, naming the entry and its line
    annotations = Annotations.from_stack(stack)
    assert len(entry.warnings) == 2
    for warning in entry.warnings:
        annotations.has_warning("/WorkerTier/PeriodicTasks", f"cron.yaml line 3, entry 'feeds': {warning} [ack: {CRON_ENTRY_WARNING_ID}]")
