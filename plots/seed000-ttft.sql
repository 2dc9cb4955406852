-- seed000-ttft: per fresh session: series (variant label), session number
-- (req_index + 1), TTFT reused (ms), TTFT cold (ms); NULL times are empty.
SELECT label, req_index + 1, ttft_reuse_ms, ttft_cold_ms
FROM req WHERE ttft_reuse_ms IS NOT NULL OR ttft_cold_ms IS NOT NULL
ORDER BY vorder, run_id, req_index;
