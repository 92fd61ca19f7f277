-- The stored times of the given signature keys on one device.
-- $device: device name; $keys: list of OpSignature keys.
SELECT key, ms
FROM cost
WHERE device = $device AND key IN (SELECT unnest($keys::VARCHAR[]))
