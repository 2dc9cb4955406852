-- tab-full-status: for a full-scale database, every run fig_runs plots (the
-- latest per variant and sweep value): its status, requests stored of the
-- transcript's, resumes, wall time from its start to its finish (or to its
-- last stored request while unfinished; interruptions included), and the
-- build. A run short of its requests is marked partial.
WITH per AS (SELECT run_id, count(*) AS n FROM req GROUP BY run_id)
SELECT coalesce(f.variant, 'run ' || f.run_id)
           || CASE WHEN f.sweep_name IS NOT NULL AND f.sweep_value IS NOT NULL
                   THEN ' ' || f.sweep_name || '=' || printf('%g', f.sweep_value) ELSE '' END AS "run",
       CASE WHEN f.status = 'done' AND per.n >= coalesce(f.n_requests, per.n) THEN 'complete'
            ELSE 'PARTIAL (' || f.status || ')' END AS "status",
       printf('%d of %d', per.n, coalesce(f.n_requests, per.n)) AS "requests",
       f.resumes AS "resumes",
       CASE WHEN f.finished_at IS NOT NULL
            THEN printf('%.2f', (julianday(f.finished_at) - julianday(f.started_at)) * 24) ELSE '-' END AS "wall (h)",
       f.threads AS "threads",
       f.git_rev AS "build"
FROM fig_runs f JOIN per USING (run_id)
ORDER BY f.vorder, f.sweep_value, f.run_id;
