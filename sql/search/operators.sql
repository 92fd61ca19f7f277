-- The operators the e-graph's e-nodes have (an opaque one with its ONNX type's key, p0): a rule
-- whose left-hand side has an operator not among them has no match, and a phase none of whose
-- rules can match is not searched (relsat/engine/phase.py). E-nodes are never removed but as
-- duplicates, so the operators only grow. No parameters.
SELECT DISTINCT op, CASE WHEN op = 'opaque' THEN p0 END FROM enode
