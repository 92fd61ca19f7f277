-- Where a stored exploration stopped: the newest stamp, the last phase's epoch, where the
-- semi-naive search of each kind goes on, and the last phase row (iteration, phase, capped,
-- epoch; NULL before any). A phase capped by the e-node limit does not count; the search goes on
-- from the last uncapped phase of the kind, or, when that phase re-ran a capped one (same kind
-- and iteration, earlier epoch), from the capped phase's epoch: the re-run searched only the
-- e-nodes born before it, so the e-nodes the capped phase added are still to be searched.
-- No parameters.
WITH done AS (
    SELECT phase, max(epoch) AS epoch, arg_max(iteration, epoch) AS iteration
    FROM iteration_stats
    WHERE capped = 0
    GROUP BY phase
), start AS (
    SELECT d.phase, coalesce(max(c.epoch), d.epoch) AS since
    FROM done d
    LEFT JOIN iteration_stats c
      ON c.phase = d.phase AND c.iteration = d.iteration AND c.capped > 0 AND c.epoch < d.epoch
    GROUP BY d.phase, d.epoch
)
SELECT (SELECT coalesce(max(stamp), 0) FROM enode),
       (SELECT coalesce(max(epoch), 0) FROM iteration_stats),
       coalesce((SELECT since FROM start WHERE phase = 'multi'), 0),
       coalesce((SELECT since FROM start WHERE phase = 'single'), 0),
       (SELECT arg_max(struct_pack(iteration, phase, capped, epoch), epoch) FROM iteration_stats)
