-- probe-*-reuse: per variant two series, "VARIANT: reported" (the reuse the
-- server reported) then "VARIANT: expected" (what its cache rule gives on the
-- common prefix with what it held); per request: 1 request number
-- (req_index + 1), 2 reuse fraction (tokens / prompt tokens), empty when the
-- server reported none or the request failed (no point).
WITH k(kind, o) AS (VALUES ('reported', 0), ('expected', 1))
SELECT label || ': ' || k.kind, req_index + 1,
       CASE WHEN error IS NOT NULL OR n_prompt <= 0 THEN ''
            WHEN k.o = 0 AND reuse_reported IS NOT NULL THEN printf('%.5f', 1.0 * reuse_reported / n_prompt)
            WHEN k.o = 1 AND reuse_expected IS NOT NULL THEN printf('%.5f', 1.0 * reuse_expected / n_prompt)
            ELSE '' END
FROM req CROSS JOIN k
ORDER BY vorder, run_id, k.o, req_index;
