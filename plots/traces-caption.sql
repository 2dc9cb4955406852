-- plots/traces-caption.sql: the caption lines of a traces figure (render.sh
-- uses NAME-caption.sql, when an experiment has one, instead of caption.sql):
-- the simulate runs the figures read (traces-lib.sql's sim_sel) and what they
-- share.
.read plots/traces-lib.sql
SELECT printf('%d simulate runs (per variant and sweep value, the latest finished)', count(*)) FROM sim_sel
UNION ALL SELECT '  trace: ' || group_concat(DISTINCT trace) || ' (sha256 ' || substr(min(trace_sha256), 1, 16) || '...)' FROM sim_sel
UNION ALL SELECT '  time model: ' || group_concat(DISTINCT profile) FROM sim_sel
UNION ALL SELECT '  ' || min(profile_source) FROM sim_sel
UNION ALL SELECT '  git_rev: ' || group_concat(DISTINCT r.git_rev) || '; cpu: ' || group_concat(DISTINCT r.cpu)
          FROM sim_sel s JOIN runs r USING (run_id)
UNION ALL SELECT 'started_at: ' || min(r.started_at) || ' .. ' || max(r.started_at) FROM sim_sel s JOIN runs r USING (run_id);
