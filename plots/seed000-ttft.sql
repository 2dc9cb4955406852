-- seed000-ttft: per fresh session, its first request: series (variant
-- label), session number, TTFT reused (ms), TTFT cold (ms); NULL times are empty.
SELECT label, session_no, ttft_reuse_ms, ttft_cold_ms
FROM req WHERE req_index = first_idx AND (ttft_reuse_ms IS NOT NULL OR ttft_cold_ms IS NOT NULL)
ORDER BY vorder, run_id, session_no;
