UPDATE leases_lease
SET fence = fence + 1
  , acquired_at = clock_timestamp()
  , status = 'held'
  , holder = %(holder)s
  , process_id = %(process_id)s
  , interval_s = %(interval_s)s
  , grace_s = %(grace_s)s
  , resource = %(resource)s
  , mode = 'exclusive'
  , key_id = %(key_id)s
  , renewed_at = clock_timestamp()
  , deadline = clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
  , released_at = NULL
  , noticed_state = 'live'
  , next_check_at = clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
  , handoff_open = 0
WHERE workspace_id = %(workspace_id)s
  AND node = %(node)s
  AND shared_by = ''
  AND status = 'free'
  AND NOT EXISTS (SELECT other.id
                  FROM leases_lease AS other
                  WHERE other.workspace_id = %(workspace_id)s
                    AND other.status = 'held'
                    AND other.kind = 'resource'
                    AND other.node = ANY(CAST(%(lineage)s AS text[]))
                    AND (NOT(other.holder = %(holder)s
                         AND other.process_id = CAST(%(process_id)s AS varchar))
                      OR other.node = %(node)s)
                    AND (%(mode)s = 'exclusive'
                      OR other.mode = 'exclusive'
                      OR (other.holder = %(holder)s
                      AND other.node = %(node)s)))
  AND NOT EXISTS (SELECT other.id
                  FROM leases_lease AS other
                  WHERE other.workspace_id = %(workspace_id)s
                    AND other.status = 'held'
                    AND other.kind = 'resource'
                    AND other.node >= %(below_low)s
                    AND other.node < %(below_high)s
                    AND (NOT(other.holder = %(holder)s
                         AND other.process_id = CAST(%(process_id)s AS varchar))
                      OR other.node = %(node)s)
                    AND (%(mode)s = 'exclusive'
                      OR other.mode = 'exclusive'
                      OR (other.holder = %(holder)s
                      AND other.node = %(node)s)))
  AND NOT EXISTS (SELECT ahead.id
                  FROM leases_waiter AS ahead
                  WHERE ahead.workspace_id = %(workspace_id)s
                    AND ahead.node = ANY(CAST(%(lineage)s AS text[]))
                    AND ahead.expires_at > clock_timestamp()
                    AND (NOT(ahead.holder = %(holder)s
                         AND ahead.process_id = CAST(%(process_id)s AS varchar))
                      OR ahead.node = %(node)s)
                    AND (%(mode)s = 'exclusive'
                      OR ahead.mode = 'exclusive'
                      OR (ahead.holder = %(holder)s
                      AND ahead.node = %(node)s))
                    AND ahead.id < %(ticket)s)
  AND NOT EXISTS (SELECT ahead.id
                  FROM leases_waiter AS ahead
                  WHERE ahead.workspace_id = %(workspace_id)s
                    AND ahead.node >= %(below_low)s
                    AND ahead.node < %(below_high)s
                    AND ahead.expires_at > clock_timestamp()
                    AND (NOT(ahead.holder = %(holder)s
                         AND ahead.process_id = CAST(%(process_id)s AS varchar))
                      OR ahead.node = %(node)s)
                    AND (%(mode)s = 'exclusive'
                      OR ahead.mode = 'exclusive'
                      OR (ahead.holder = %(holder)s
                      AND ahead.node = %(node)s))
                    AND ahead.id < %(ticket)s)
RETURNING id
        , workspace_id
        , resource
        , kind
        , status
        , holder
        , process_id
        , fence
        , interval_s
        , grace_s
        , acquired_at
        , renewed_at
        , deadline
        , released_at
        , mode
        , shared_by
        , handoff_open
        , clock_timestamp() AS server_time
