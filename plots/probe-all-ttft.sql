-- probe-*-ttft: per variant two series, "VARIANT: cold" and "VARIANT: warm";
-- per request: 1 request number, 2 TTFT (ms: the time to the first event
-- carrying a token, from the request being sent; with --repeat N the median),
-- 3 and 4 the fastest and slowest of the N (the one timing without --repeat);
-- empty for a failed request.
WITH k(kind, o) AS (VALUES ('cold', 0), ('warm', 1))
SELECT label || ': ' || k.kind, req_index + 1,
       CASE WHEN error IS NOT NULL THEN '' WHEN k.o = 0 THEN round(ttft_cold_ms, 3) ELSE round(ttft_reuse_ms, 3) END,
       CASE WHEN error IS NOT NULL THEN '' WHEN k.o = 0 THEN round(coalesce(ttft_cold_min_ms, ttft_cold_ms), 3)
            ELSE round(coalesce(ttft_reuse_min_ms, ttft_reuse_ms), 3) END,
       CASE WHEN error IS NOT NULL THEN '' WHEN k.o = 0 THEN round(coalesce(ttft_cold_max_ms, ttft_cold_ms), 3)
            ELSE round(coalesce(ttft_reuse_max_ms, ttft_reuse_ms), 3) END
FROM req CROSS JOIN k
ORDER BY vorder, run_id, k.o, req_index;
