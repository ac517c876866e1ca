INSERT INTO leases_lease (workspace_id
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
                        , noticed_state
                        , next_check_at
                        , mode
                        , shared_by
                        , key_id)
SELECT %(workspace_id)s
     , %(resource)s
     , %(kind)s
     , 'held'
     , %(holder)s
     , %(process_id)s
     , 1
     , %(interval_s)s
     , %(grace_s)s
     , clock_timestamp()
     , clock_timestamp()
     , clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
     , 'live'
     , clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
     , 'exclusive'
     , ''
     , %(key_id)s
WHERE NOT EXISTS (SELECT other.id
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
ON CONFLICT (workspace_id
           , node
           , shared_by) DO NOTHING
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
