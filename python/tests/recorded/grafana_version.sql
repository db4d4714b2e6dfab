-- Grafana 11 (PostgreSQL data source): the server version it reads to choose its SQL.
SELECT current_setting('server_version_num')::int/100 as version
