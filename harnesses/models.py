"""A harness session: the process identity (`<harness>:<session id>`) whose leases its hook
events take and renew, and the repositories its agent's side registered, which name its files
(`harnesses.naming`)."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class HookSession(models.Model):
    # The hand's workspace: every row names its tenant (docs/scale.md).
    workspace_id = models.BigIntegerField()
    hand = models.ForeignKey("hands.Hand", on_delete=models.CASCADE, related_name="hook_sessions")
    harness = models.CharField(max_length=32)
    session_id = models.CharField(max_length=200)
    # The session's process identity: every lease its events take is held by it.
    process_id = models.CharField(max_length=200)
    # Absolute paths of the repositories' top levels, as spelled on the agent's side (a top level
    # reached through a link is registered both ways).
    repositories = models.JSONField(default=list, blank=True)
    # Tracked symbolic links: link's absolute path -> the absolute path it resolves to.
    links = models.JSONField(default=dict, blank=True)
    # The session's leases are renewed by each of its events, for this long.
    ttl_s = models.FloatField()
    started_at = models.DateTimeField(db_default=Now())
    last_event_at = models.DateTimeField(db_default=Now())
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Pruned by its last event (ops/jobs.py, as old as the events).
        indexes = [models.Index(fields=["last_event_at"], name="hook_session_last_event_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace_id", "hand", "process_id"], name="hook_session_unique"
            )
        ]

    def __str__(self) -> str:
        return self.process_id
