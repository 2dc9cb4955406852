-- seed000-anchor: per fresh session: series (variant label), session number,
-- ms spent writing disk anchors over the session's requests (0 when none
-- was written), anchors written.
SELECT min(label), session_no, round(sum(anchor_write), 4),
       sum(anchor_write > 0 OR anchor_at IS NOT NULL)
FROM req GROUP BY run_id, session_no ORDER BY min(vorder), run_id, session_no;
