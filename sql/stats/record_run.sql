-- One row of the run table per exploration call: when it started, how many iterations it ran,
-- why it stopped, its seconds and its settings (JSON). Parameters: $started, $iterations,
-- $stop, $seconds, $settings.
INSERT INTO run VALUES ($started, $iterations, $stop, $seconds, $settings)
