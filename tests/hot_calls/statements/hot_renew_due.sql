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
     )
   , renewed AS (
       UPDATE leases_lease
       SET renewed_at = clock_timestamp()
         , deadline = clock_timestamp() + interval_s * CAST('1 second' AS interval)
         , noticed_state = 'live'
       WHERE id = ANY(ARRAY(SELECT id
                            FROM leases_lease
                            WHERE leases_lease.workspace_id = %(workspace_id)s
                              AND holder = (SELECT key_holder
                                            FROM key)
                              AND process_id = %(process_id)s
                              AND kind = 'resource'
                              AND (status = 'held'
                               AND clock_timestamp() <= deadline + grace_s * 1.0 * CAST('1 second' AS interval))
                              AND renewed_at < clock_timestamp() - interval_s * 0.1 * CAST('1 second' AS interval)
                            ORDER BY id
                            FOR UPDATE))
         AND leases_lease.workspace_id = %(workspace_id)s
         AND holder = (SELECT key_holder
                       FROM key)
         AND process_id = %(process_id)s
         AND kind = 'resource'
         AND (status = 'held'
          AND clock_timestamp() <= deadline + grace_s * 1.0 * CAST('1 second' AS interval))
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
   , kept AS (
       SELECT id
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
       FROM leases_lease
       WHERE leases_lease.workspace_id = %(workspace_id)s
         AND holder = (SELECT key_holder
                       FROM key)
         AND process_id = %(process_id)s
         AND kind = 'resource'
         AND (status = 'held'
          AND clock_timestamp() <= deadline + grace_s * 1.0 * CAST('1 second' AS interval))
         AND NOT renewed_at < clock_timestamp() - interval_s * 0.1 * CAST('1 second' AS interval)
     )
  SELECT renewed.*
       , key.key_id
       , key.key_used_at
  FROM renewed, key

  UNION ALL

  SELECT kept.*
       , key.key_id
       , key.key_used_at
  FROM kept, key
