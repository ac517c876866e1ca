UPDATE leases_lease
SET renewed_at = clock_timestamp()
  , deadline = clock_timestamp() + interval_s * CAST('1 second' AS interval)
  , noticed_state = 'live'
FROM fleet_handkey AS k, fleet_attempt AS mine
WHERE mine.id = %(attempt_id)s
  AND mine.workspace_id = %(workspace_id)s
  AND mine.hand_id = k.hand_id + 0
  AND mine.fence = %(fence)s
  AND mine."end" IS NULL
  AND k.prefix = %(key_prefix)s
  AND k.secret_hash = %(key_secret_hash)s
  AND k.revoked_at IS NULL
  AND NOT(k.expires_at IS NOT NULL
      AND k.expires_at <= clock_timestamp())
  AND (k.bound_lease_id IS NULL
    OR EXISTS (SELECT 1
               FROM leases_lease AS bl
               WHERE bl.id = k.bound_lease_id
                 AND bl.fence = k.bound_fence
                 AND (bl.status = 'held'
                  AND clock_timestamp() <= bl.deadline + bl.grace_s * 1.0 * CAST('1 second' AS interval))))
  AND k.scopes @> CAST('["work"]' AS jsonb)
  AND mine.lane_id = COALESCE(k.lane_id, mine.lane_id)
  AND leases_lease.id = COALESCE(%(lease_id)s
                               , (SELECT known.lease_id
                                  FROM fleet_attempt AS known
                                  WHERE known.id = %(attempt_id)s
                                    AND known.workspace_id = %(workspace_id)s))
  AND mine.lease_id = leases_lease.id
  AND leases_lease.fence = mine.fence
  AND leases_lease.workspace_id = mine.workspace_id
  AND leases_lease.process_id = %(process_id)s
  AND (status = 'held'
   AND clock_timestamp() <= deadline + grace_s * 1.0 * CAST('1 second' AS interval))
RETURNING leases_lease.resource
        , leases_lease.holder
        , leases_lease.interval_s
        , leases_lease.grace_s
        , leases_lease.acquired_at
        , leases_lease.renewed_at
        , leases_lease.deadline
        , clock_timestamp()
        , leases_lease.handoff_open
        , mine.run_id
        , mine.process_id
        , mine.directive
        , mine.claimed_at
        , mine.last_report_at
        , mine.ended_at
        , mine.end_reason
        , mine.summary
        , mine.progress_percent
        , mine.progress_timeout_s
        , mine.last_progress_at
        , mine.idle_since
        , mine.budget_notice
        , mine.budget_until
        , mine.lane_id
        ,    mine.last_report_at IS NULL
          OR mine.last_report_at <= clock_timestamp() - CAST('60 seconds' AS interval)
        , mine.workspace_id
        , mine.lease_id
        , k.id
        , k.last_used_at
