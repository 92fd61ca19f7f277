-- Forget the previous pricing of the e-nodes (relsat.cost.price_egraph writes a new one).
-- No parameters.
DELETE FROM enode_cost
