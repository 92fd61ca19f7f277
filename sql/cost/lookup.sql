-- The stored times of the given signature keys on one device, with their spread and load
-- (NULL: unknown).
-- $device: device name; $keys: list of OpSignature keys.
SELECT key, ms, spread, load
FROM cost
WHERE device = $device AND key IN (SELECT unnest($keys::VARCHAR[]))
