WITH key AS (
       SELECT k.id AS key_id
            , h.name AS key_holder
            , k.last_used_at AS key_used_at
       FROM fleet_handkey AS k
            INNER JOIN fleet_hand AS h ON h.id = k.hand_id
       WHERE k.prefix = %(key_prefix)s
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
         AND k.scopes @> CAST('["leases"]' AS jsonb)
         AND h.workspace_id = %(workspace_id)s
       FOR SHARE OF k
     )
   , inserted AS (
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
            , (SELECT key_holder
               FROM key)
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
            , (SELECT key_id
               FROM key)
       FROM key
       WHERE NOT EXISTS (SELECT other.id
                         FROM leases_lease AS other
                         WHERE other.workspace_id = %(workspace_id)s
                           AND other.status = 'held'
                           AND other.kind = 'resource'
                           AND other.node = ANY(CAST(%(lineage)s AS text[]))
                           AND (NOT(other.holder = (SELECT key_holder
                                                    FROM key)
                                AND other.process_id = CAST(%(process_id)s AS varchar))
                             OR other.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR other.mode = 'exclusive'
                             OR (other.holder = (SELECT key_holder
                                                 FROM key)
                             AND other.node = %(node)s)))
         AND NOT EXISTS (SELECT other.id
                         FROM leases_lease AS other
                         WHERE other.workspace_id = %(workspace_id)s
                           AND other.status = 'held'
                           AND other.kind = 'resource'
                           AND other.node >= %(below_low)s
                           AND other.node < %(below_high)s
                           AND (NOT(other.holder = (SELECT key_holder
                                                    FROM key)
                                AND other.process_id = CAST(%(process_id)s AS varchar))
                             OR other.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR other.mode = 'exclusive'
                             OR (other.holder = (SELECT key_holder
                                                 FROM key)
                             AND other.node = %(node)s)))
         AND NOT EXISTS (SELECT ahead.id
                         FROM leases_waiter AS ahead
                         WHERE ahead.workspace_id = %(workspace_id)s
                           AND ahead.node = ANY(CAST(%(lineage)s AS text[]))
                           AND ahead.expires_at > clock_timestamp()
                           AND (NOT(ahead.holder = (SELECT key_holder
                                                    FROM key)
                                AND ahead.process_id = CAST(%(process_id)s AS varchar))
                             OR ahead.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR ahead.mode = 'exclusive'
                             OR (ahead.holder = (SELECT key_holder
                                                 FROM key)
                             AND ahead.node = %(node)s))
                           AND ahead.id < %(ticket)s)
         AND NOT EXISTS (SELECT ahead.id
                         FROM leases_waiter AS ahead
                         WHERE ahead.workspace_id = %(workspace_id)s
                           AND ahead.node >= %(below_low)s
                           AND ahead.node < %(below_high)s
                           AND ahead.expires_at > clock_timestamp()
                           AND (NOT(ahead.holder = (SELECT key_holder
                                                    FROM key)
                                AND ahead.process_id = CAST(%(process_id)s AS varchar))
                             OR ahead.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR ahead.mode = 'exclusive'
                             OR (ahead.holder = (SELECT key_holder
                                                 FROM key)
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
     )
   , taken AS (
       UPDATE leases_lease
       SET fence = fence + 1
         , acquired_at = clock_timestamp()
         , status = 'held'
         , holder = (SELECT key_holder
                     FROM key)
         , process_id = %(process_id)s
         , interval_s = %(interval_s)s
         , grace_s = %(grace_s)s
         , resource = %(resource)s
         , mode = 'exclusive'
         , key_id = (SELECT key_id
                     FROM key)
         , renewed_at = clock_timestamp()
         , deadline = clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
         , released_at = NULL
         , noticed_state = 'live'
         , next_check_at = clock_timestamp() + CAST(%(interval_s)s AS double precision) * CAST('1 second' AS interval)
         , handoff_open = 0
       FROM key
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
                           AND (NOT(other.holder = (SELECT key_holder
                                                    FROM key)
                                AND other.process_id = CAST(%(process_id)s AS varchar))
                             OR other.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR other.mode = 'exclusive'
                             OR (other.holder = (SELECT key_holder
                                                 FROM key)
                             AND other.node = %(node)s)))
         AND NOT EXISTS (SELECT other.id
                         FROM leases_lease AS other
                         WHERE other.workspace_id = %(workspace_id)s
                           AND other.status = 'held'
                           AND other.kind = 'resource'
                           AND other.node >= %(below_low)s
                           AND other.node < %(below_high)s
                           AND (NOT(other.holder = (SELECT key_holder
                                                    FROM key)
                                AND other.process_id = CAST(%(process_id)s AS varchar))
                             OR other.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR other.mode = 'exclusive'
                             OR (other.holder = (SELECT key_holder
                                                 FROM key)
                             AND other.node = %(node)s)))
         AND NOT EXISTS (SELECT ahead.id
                         FROM leases_waiter AS ahead
                         WHERE ahead.workspace_id = %(workspace_id)s
                           AND ahead.node = ANY(CAST(%(lineage)s AS text[]))
                           AND ahead.expires_at > clock_timestamp()
                           AND (NOT(ahead.holder = (SELECT key_holder
                                                    FROM key)
                                AND ahead.process_id = CAST(%(process_id)s AS varchar))
                             OR ahead.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR ahead.mode = 'exclusive'
                             OR (ahead.holder = (SELECT key_holder
                                                 FROM key)
                             AND ahead.node = %(node)s))
                           AND ahead.id < %(ticket)s)
         AND NOT EXISTS (SELECT ahead.id
                         FROM leases_waiter AS ahead
                         WHERE ahead.workspace_id = %(workspace_id)s
                           AND ahead.node >= %(below_low)s
                           AND ahead.node < %(below_high)s
                           AND ahead.expires_at > clock_timestamp()
                           AND (NOT(ahead.holder = (SELECT key_holder
                                                    FROM key)
                                AND ahead.process_id = CAST(%(process_id)s AS varchar))
                             OR ahead.node = %(node)s)
                           AND (%(mode)s = 'exclusive'
                             OR ahead.mode = 'exclusive'
                             OR (ahead.holder = (SELECT key_holder
                                                 FROM key)
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
     )
   , granted AS (
       SELECT *
       FROM inserted

       UNION ALL

       SELECT *
       FROM taken
     )
   , event AS (
       INSERT INTO leases_event (workspace_id
                               , kind
                               , at
                               , actor
                               , hand
                               , resource
                               , fence
                               , data
                               , actor_key)
       SELECT workspace_id
            , 'lease_acquired'
            , server_time
            , holder
            , holder
            , resource
            , fence
            , CAST(%(event_data)s AS jsonb)
            , %(key_prefix)s
       FROM granted
     )
  SELECT granted.*
       , key.key_id
       , key.key_used_at
  FROM granted, key
