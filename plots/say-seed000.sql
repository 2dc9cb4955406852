-- say-seed000: one sentence for REPORT.md with the numbers of seed000, per
-- variant: the median tokens prefilled by the sessions after the first, the
-- median prompt, and the anchors written with their total write time.
WITH
later AS (SELECT run_id, n_prefilled AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY n_prefilled) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE req_index > (SELECT min(req_index) FROM req r2 WHERE r2.run_id = req.run_id)),
prompt AS (SELECT run_id, n_prompt AS x,
                  row_number() OVER (PARTITION BY run_id ORDER BY n_prompt) AS k,
                  count(*) OVER (PARTITION BY run_id) AS n
           FROM req),
l50 AS (SELECT run_id, avg(x) AS p50 FROM later WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
p50 AS (SELECT run_id, avg(x) AS p50 FROM prompt WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
per AS (SELECT run_id, min(vorder) AS vo, coalesce(min(variant), 'run ' || run_id) AS v, count(*) AS n,
               sum(anchor_write > 0 OR anchor_at IS NOT NULL) AS na, sum(anchor_write) AS tot
        FROM req GROUP BY run_id),
s AS (SELECT per.vo, printf('%s: %d sessions; %s; median prompt %g tokens; %d anchor%s written, %.2f ms in total',
                            per.v, per.n,
                            CASE WHEN l50.p50 IS NULL THEN 'no session after the first'
                                 ELSE printf('sessions after the first prefill a median of %g tokens', l50.p50) END,
                            p50.p50, per.na, CASE WHEN per.na = 1 THEN '' ELSE 's' END, per.tot) AS t
      FROM per LEFT JOIN l50 USING (run_id) LEFT JOIN p50 USING (run_id))
SELECT 'In this database: ' || group_concat(t, '. ') || '.' FROM (SELECT t FROM s ORDER BY vo)
HAVING count(*) > 0;
