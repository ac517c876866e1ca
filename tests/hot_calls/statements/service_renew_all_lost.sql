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
  AND holder = %(holder)s
  AND process_id = %(process_id)s
  AND kind = 'resource'
  AND status = 'held'
  AND NOT(status = 'held'
      AND clock_timestamp() <= deadline + grace_s * 1.0 * CAST('1 second' AS interval))
