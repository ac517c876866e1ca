SELECT CASE
         WHEN depth < %(lock_depth)s
           THEN pg_advisory_xact_lock_shared(hashtext('gc-tree:' || CAST(%(workspace_id)s AS text) || ':' || depth)
                                           , hashtext(name))
         ELSE pg_advisory_xact_lock(hashtext('gc-tree:' || CAST(%(workspace_id)s AS text) || ':' || depth)
                                  , hashtext(name))
       END
FROM unnest(CAST(%(lock_lineage)s AS text[])) WITH ORDINALITY AS line (name, depth)
ORDER BY depth
