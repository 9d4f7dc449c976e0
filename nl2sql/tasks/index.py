"""The index build's steps as Prefect tasks."""

from __future__ import annotations

from nl2sql.index import build
from nl2sql.tasks import step_task

reflect = step_task(build.plan_build, name="reflect", retries=1)
profile = step_task(build.profile_tables, name="profile")
entries = step_task(build.make_entries, name="entries")
embed = step_task(build.embed_entries, name="embed")
commit = step_task(build.commit_index, name="commit")
