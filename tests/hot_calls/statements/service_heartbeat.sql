UPDATE leases_lease
SET renewed_at = clock_timestamp()
  , deadline = clock_timestamp() + interval_s * CAST('1 second' AS interval)
  , noticed_state = 'live'
FROM fleet_attempt AS mine
WHERE mine.id = %(attempt_id)s
  AND mine.workspace_id = %(workspace_id)s
  AND mine.hand_id = %(hand_id)s
  AND mine.fence = %(fence)s
  AND mine."end" IS NULL
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
RETURNING leases_lease.id
        , leases_lease.workspace_id
        , leases_lease.resource
        , leases_lease.kind
        , leases_lease.status
        , leases_lease.holder
        , leases_lease.process_id
        , leases_lease.fence
        , leases_lease.interval_s
        , leases_lease.grace_s
        , leases_lease.acquired_at
        , leases_lease.renewed_at
        , leases_lease.deadline
        , leases_lease.released_at
        , leases_lease.mode
        , leases_lease.shared_by
        , leases_lease.handoff_open
        , clock_timestamp()
        , mine.id
        , mine.workspace_id
        , mine.run_id
        , mine.slot_id
        , mine.hand_id
        , mine.lane_id
        , mine.lease_id
        , mine.fence
        , mine.process_id
        , mine.directive
        , mine.claimed_at
        , mine.last_report_at
        , mine.ended_at
        , mine."end"
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
