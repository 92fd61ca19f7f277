-- Where a stored exploration stopped: the newest stamp, the last phase's epoch, where the
-- semi-naive search of each kind ('runtime', 'multi', 'single') goes on, and the last phase row
-- (iteration, phase, capped, epoch, whether it changed the e-graph; NULL before any) with
-- `first`, the epoch of the first of the capped phases it ends (a phase capped by the e-node
-- limit is run again, maybe capped again: each run searches the e-nodes born before the first,
-- as the uncapped phase would have). A capped phase does not count for the semi-naive start: the
-- search goes on from the last uncapped phase of the kind, or, when that phase re-ran capped ones
-- (same kind and iteration, earlier epochs), from the first of them: the e-nodes the capped runs
-- added are still to be searched. No parameters.
WITH done AS (
    SELECT phase, max(epoch) AS epoch, arg_max(iteration, epoch) AS iteration
    FROM iteration_stats
    WHERE capped = 0
    GROUP BY phase
), start AS (
    SELECT d.phase, coalesce(min(c.epoch), d.epoch) AS since
    FROM done d
    LEFT JOIN iteration_stats c
      ON c.phase = d.phase AND c.iteration = d.iteration AND c.capped > 0 AND c.epoch < d.epoch
    GROUP BY d.phase, d.epoch
), last AS (
    SELECT arg_max(struct_pack(iteration, phase, capped, epoch,
                               changed := new_enodes > 0 OR unions > 0 OR filtered > 0), epoch) AS row
    FROM iteration_stats
)
SELECT (SELECT coalesce(max(stamp), 0) FROM enode),
       (SELECT coalesce(max(epoch), 0) FROM iteration_stats),
       coalesce((SELECT since FROM start WHERE phase = 'runtime'), 0),
       coalesce((SELECT since FROM start WHERE phase = 'multi'), 0),
       coalesce((SELECT since FROM start WHERE phase = 'single'), 0),
       (SELECT struct_insert(l.row, first := (
                   SELECT min(s.epoch) FROM iteration_stats s
                   WHERE s.capped > 0 AND s.iteration = l.row.iteration
                     AND s.phase = l.row.phase))
        FROM last l WHERE l.row IS NOT NULL)
