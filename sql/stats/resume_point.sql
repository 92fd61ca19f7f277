-- Where a stored exploration stopped: the newest stamp, the last phase's epoch, the last epoch of
-- an uncapped phase of each kind (where the semi-naive search goes on), and the last phase row
-- (iteration, phase, capped, epoch; NULL before any). No parameters.
SELECT (SELECT coalesce(max(stamp), 0) FROM enode),
       coalesce(max(epoch), 0),
       coalesce(max(epoch) FILTER (WHERE phase = 'multi' AND capped = 0), 0),
       coalesce(max(epoch) FILTER (WHERE phase = 'single' AND capped = 0), 0),
       arg_max(struct_pack(iteration, phase, capped, epoch), epoch)
FROM iteration_stats
