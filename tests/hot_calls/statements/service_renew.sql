UPDATE leases_lease
SET renewed_at = clock_timestamp()
  , deadline = clock_timestamp() + interval_s * CAST('1 second' AS interval)
  , noticed_state = 'live'
WHERE workspace_id = %(workspace_id)s
  AND node = %(node)s
  AND holder = %(holder)s
  AND fence = %(fence)s
  AND process_id = %(process_id)s
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
