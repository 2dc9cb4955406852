-- say-seed000: one sentence for REPORT.md with the numbers of seed000, per
-- variant: over the first request of each fresh session, the median tokens
-- prefilled by the sessions after the first and the median prompt; over all
-- requests, the anchors written and their total write time. "Fast" later
-- sessions prefilled less than a quarter of their prompt: they resumed
-- above the last waypoint, from an anchor.
WITH
firsts AS (SELECT * FROM req WHERE req_index = first_idx),
later AS (SELECT run_id, n_prefilled AS x, (4 * n_prefilled < n_prompt) AS fast,
                 row_number() OVER (PARTITION BY run_id ORDER BY n_prefilled) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM firsts WHERE session_no > 1),
prompt AS (SELECT run_id, n_prompt AS x,
                  row_number() OVER (PARTITION BY run_id ORDER BY n_prompt) AS k,
                  count(*) OVER (PARTITION BY run_id) AS n
           FROM firsts),
l50 AS (SELECT run_id, avg(x) AS p50 FROM later WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
lf AS (SELECT run_id, sum(fast) AS nf, count(*) AS nl FROM later GROUP BY run_id),
p50 AS (SELECT run_id, avg(x) AS p50 FROM prompt WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
per AS (SELECT run_id, min(vorder) AS vo, coalesce(min(variant), 'run ' || run_id) AS v,
               max(session_no) AS n, sum(anchor_write > 0 OR anchor_at IS NOT NULL) AS na,
               sum(anchor_write) AS tot
        FROM req GROUP BY run_id),
s AS (SELECT per.vo, printf('%s: %d fresh sessions; %s (median first prompt %g tokens); %d anchor%s written, %.2f ms in total',
                            per.v, per.n,
                            CASE WHEN l50.p50 IS NULL THEN 'no session after the first'
                                 ELSE printf('the first request of each session after the first prefills a median of %g tokens, '
                                             || 'and %d of %d such sessions prefill less than a quarter of their prompt',
                                             l50.p50, lf.nf, lf.nl) END,
                            p50.p50, per.na, CASE WHEN per.na = 1 THEN '' ELSE 's' END, per.tot) AS t
      FROM per LEFT JOIN l50 USING (run_id) LEFT JOIN lf USING (run_id) LEFT JOIN p50 USING (run_id))
SELECT 'In this database: ' || group_concat(t, '. ') || '.' FROM (SELECT t FROM s ORDER BY vo)
HAVING count(*) > 0;
