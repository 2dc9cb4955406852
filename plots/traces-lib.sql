-- plots/traces-lib.sql: the simulate runs a traces figure or table reads
-- (read after lib.sql by the traces-*.sql queries themselves; lib.sql's views
-- select runs with `requests` rows, which simulate runs do not have).
-- sim_sel: per (variant, sweep_value), the latest finished simulate run.
CREATE TEMP VIEW IF NOT EXISTS sim_sel AS
SELECT r.run_id, r.variant, r.sweep_value, s.*
FROM runs r JOIN sim_runs s USING (run_id)
WHERE r.status = 'done'
  AND r.run_id = (SELECT max(x.run_id) FROM runs x JOIN sim_runs y USING (run_id)
                  WHERE x.status = 'done' AND x.variant IS r.variant AND x.sweep_value IS r.sweep_value);
