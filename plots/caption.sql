-- plots/caption.sql: the configuration of the runs in fig_runs, as the text
-- lines of a figure's caption file (NAME-FIG.txt). Output: one line a row
-- (sqlite3 -list -noheader).
--   N runs ...                       how many runs the figure plots
--   (fields that are '-' in every run, e.g. policy knobs not in use, are left out)
--   Common to all runs:              every field with one value across them
--     KEY: VALUE
--   Per run:                         the fields that differ, run by run
--     run ID VARIANT [SWEEP=V]: KEY=VALUE, ...
--   started_at: FIRST .. LAST        when the runs began
WITH kv(run_id, ord, k, v) AS (
    SELECT run_id, 1, 'model_name', coalesce(model_name, '-') FROM fig_runs
    UNION ALL SELECT run_id, 2, 'n_params',
        CASE WHEN n_params IS NULL THEN '-'
             ELSE printf('%d (%.1fM)', n_params, n_params / 1e6) END FROM fig_runs
    UNION ALL SELECT run_id, 3, 'policy', coalesce(policy, '-') FROM fig_runs
    UNION ALL SELECT run_id, 4, 'quirks',
        CASE WHEN coalesce(quirks, '') = '' THEN 'none' ELSE quirks END FROM fig_runs
    UNION ALL SELECT run_id, 5, 'normalize',
        CASE WHEN coalesce(normalize, '') = '' THEN 'none' ELSE normalize END FROM fig_runs
    UNION ALL SELECT run_id, 6, 'align', coalesce(align, '-') FROM fig_runs
    UNION ALL SELECT run_id, 7, 'chunk', coalesce(chunk, '-') FROM fig_runs
    UNION ALL SELECT run_id, 8, 'ubatch', coalesce(ubatch, '-') FROM fig_runs
    UNION ALL SELECT run_id, 9, 'kernel', coalesce(kernel, '-') FROM fig_runs
    UNION ALL SELECT run_id, 10, 'precision', coalesce(precision, '-') FROM fig_runs
    UNION ALL SELECT run_id, 11, 'threads', coalesce(threads, '-') FROM fig_runs
    UNION ALL SELECT run_id, 12, 'decode_n', coalesce(decode_n, '-') FROM fig_runs
    UNION ALL SELECT run_id, 13, 'transcript', coalesce(transcript, '-') FROM fig_runs
    UNION ALL SELECT run_id, 14, 'cpu', coalesce(cpu, '-') FROM fig_runs
    UNION ALL SELECT run_id, 15, 'blas', coalesce(blas, '-') FROM fig_runs
    UNION ALL SELECT run_id, 16, 'git_rev', coalesce(git_rev, '-') FROM fig_runs
    UNION ALL SELECT run_id, 17, 'seed', coalesce(seed, '-') FROM fig_runs
    UNION ALL SELECT run_id, 18, 'ctx_checkpoints', coalesce(ctx_checkpoints, '-') FROM fig_runs
    UNION ALL SELECT run_id, 19, 'checkpoint_every', coalesce(checkpoint_every, '-') FROM fig_runs
    UNION ALL SELECT run_id, 20, 'cache_ram',
        CASE WHEN coalesce(cache_ram, 0) = 0 THEN '-' ELSE printf('%d MiB', cache_ram / 1048576) END FROM fig_runs
    UNION ALL SELECT run_id, 21, 'waypoint_every', coalesce(waypoint_every, '-') FROM fig_runs
    UNION ALL SELECT run_id, 22, 'block_size', coalesce(block_size, '-') FROM fig_runs
    UNION ALL SELECT run_id, 23, 'cap_prompt',
        CASE cap_prompt WHEN 1 THEN 'on' WHEN 0 THEN 'off' ELSE '-' END FROM fig_runs
    UNION ALL SELECT run_id, 24, 'policy_opts', coalesce(policy_opts, '-') FROM fig_runs
    UNION ALL SELECT run_id, 25, 'repeat', coalesce(n_repeat, '-') FROM fig_runs
    UNION ALL SELECT run_id, 26, 'modeled TTFT priced at',
        CASE WHEN price_gflops IS NULL THEN '-'
             ELSE printf('%.6g GFLOP/s, restore %.6g GB/s (%s)', price_gflops, price_restore_gbs,
                         coalesce(price_source, '?')) END FROM fig_runs
    UNION ALL SELECT run_id, 27, 'calibration measured',
        CASE WHEN calib_gflops IS NULL THEN '-'
             ELSE printf('%.4g GFLOP/s, restore %.4g GB/s', calib_gflops, calib_restore_gbs) END FROM fig_runs
),
nd AS (SELECT k, count(DISTINCT v) AS n FROM kv GROUP BY k
       HAVING max(v) != '-' OR min(v) != '-'),
per_run AS (
    SELECT run_id, group_concat(k || '=' || v, ', ') AS kvs
    FROM (SELECT kv.* FROM kv JOIN nd USING (k) WHERE nd.n > 1 ORDER BY run_id, ord)
    GROUP BY run_id
)
SELECT line FROM (
    SELECT 0 AS sec, 0 AS o, printf('%d run%s (per variant and sweep value, the latest with requests):',
                                    count(*), CASE WHEN count(*) = 1 THEN '' ELSE 's' END) AS line
    FROM fig_runs
    UNION ALL SELECT 1, 0, 'Common to all runs:'
    UNION ALL SELECT 1, min(ord), printf('  %-11s %s', k || ':', min(v))
        FROM kv JOIN nd USING (k) WHERE nd.n = 1 GROUP BY k
    UNION ALL SELECT 2, 0, 'Per run:' WHERE EXISTS (SELECT 1 FROM per_run)
    UNION ALL SELECT 2, f.run_id,
        printf('  run %d %s%s: %s', f.run_id, coalesce(f.variant, '-'),
               CASE WHEN f.sweep_name IS NOT NULL AND f.sweep_value IS NOT NULL
                    THEN ' ' || f.sweep_name || '=' || printf('%g', f.sweep_value) ELSE '' END,
               p.kvs)
        FROM per_run p JOIN fig_runs f USING (run_id)
    UNION ALL SELECT 3, 0, 'started_at: ' || min(started_at)
        || CASE WHEN count(*) > 1 THEN ' .. ' || max(started_at) ELSE '' END
        FROM fig_runs
) ORDER BY sec, o;
