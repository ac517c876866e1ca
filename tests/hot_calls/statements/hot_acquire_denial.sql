SELECT way.*
     , ARRAY(SELECT holder
             FROM leases_waiter
             WHERE workspace_id = %(workspace_id)s
               AND id IN (SELECT ahead.id
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
                            AND ahead.id < %(ticket)s

                          UNION

                          SELECT ahead.id
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
             ORDER BY id) AS waiting
     , (SELECT tenure_mean_s
        FROM leases_lease
        WHERE workspace_id = %(workspace_id)s
          AND node = %(node)s
          AND tenure_mean_s IS NOT NULL
        ORDER BY id
        LIMIT 1) AS mean
FROM (SELECT 1) AS one
     LEFT JOIN LATERAL (SELECT id
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
                             , count(*) OVER () AS in_all
                        FROM leases_lease
                        WHERE leases_lease.workspace_id = %(workspace_id)s
                          AND id IN (SELECT other.id
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
                                         AND other.node = %(node)s))

                                     UNION ALL

                                     SELECT other.id
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
                        ORDER BY holder = %(holder)s
                             AND process_id = CAST(%(process_id)s AS varchar) DESC
                               , deadline
                        LIMIT %(limit)s) AS way ON TRUE
