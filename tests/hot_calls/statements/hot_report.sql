WITH renewed AS (
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
       RETURNING leases_lease.id AS id
               , leases_lease.workspace_id AS workspace_id
               , leases_lease.resource AS resource
               , leases_lease.kind AS kind
               , leases_lease.status AS status
               , leases_lease.holder AS holder
               , leases_lease.process_id AS process_id
               , leases_lease.fence AS fence
               , leases_lease.interval_s AS interval_s
               , leases_lease.grace_s AS grace_s
               , leases_lease.acquired_at AS acquired_at
               , leases_lease.renewed_at AS renewed_at
               , leases_lease.deadline AS deadline
               , leases_lease.released_at AS released_at
               , leases_lease.mode AS mode
               , leases_lease.shared_by AS shared_by
               , leases_lease.handoff_open AS handoff_open
               , clock_timestamp() AS server_time
               , mine.id AS attempt_id
               , mine.workspace_id AS caller_workspace_id
               , mine.lease_id AS lease_id
               , k.id AS key_id
               , k.last_used_at AS key_used_at
     )
   , report AS (
       INSERT INTO fleet_report (workspace_id
                               , attempt_id
                               , kind
                               , at
                               , process_id
                               , renewed
                               , message
                               , percent
                               , details
                               , checkpoint)
       SELECT workspace_id
            , attempt_id
            , %(kind)s
            , server_time
            , %(process_id)s
            , TRUE
            , %(message)s
            , %(percent)s
            , CAST(%(details)s AS jsonb)
            , CAST(%(checkpoint)s AS text)
       FROM renewed
     )
   , stamped AS (
       UPDATE fleet_attempt
       SET last_report_at = renewed.server_time
         , last_progress_at = renewed.server_time
         , idle_since = NULL
       FROM renewed
       WHERE fleet_attempt.id = renewed.attempt_id
         AND fleet_attempt.workspace_id = %(workspace_id)s
       RETURNING fleet_attempt.*
     )
  SELECT renewed.resource
       , renewed.holder
       , renewed.interval_s
       , renewed.grace_s
       , renewed.acquired_at
       , renewed.renewed_at
       , renewed.deadline
       , renewed.server_time
       , renewed.handoff_open
       , stamped.run_id
       , stamped.process_id
       , stamped.directive
       , stamped.claimed_at
       , stamped.last_report_at
       , stamped.ended_at
       , stamped.end_reason
       , stamped.summary
       , stamped.progress_percent
       , stamped.progress_timeout_s
       , stamped.last_progress_at
       , stamped.idle_since
       , stamped.budget_notice
       , stamped.budget_until
       , stamped.lane_id
       , FALSE
       , renewed.caller_workspace_id
       , renewed.lease_id
       , renewed.key_id
       , renewed.key_used_at
  FROM renewed, stamped
