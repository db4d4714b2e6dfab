-- DataGrip 2025.2's first queries on a new PostgreSQL connection (pgjdbc, extended
-- protocol), as its users and the projects it was tried against recorded them: the
-- connection check, then the introspector's start (server start time, schemas with
-- their state numbers from the xmin system column). One statement per line.
SET extra_float_digits = 3
SET application_name = ''
select version()
SET application_name = 'DataGrip 2025.2.3'
select current_database() as a, current_schemas(false) as b
SHOW TRANSACTION ISOLATION LEVEL
select current_database(), current_schema(), current_user
SELECT round(EXTRACT(EPOCH FROM pg_postmaster_start_time() AT TIME ZONE 'UTC')) AS startup_time
select N.oid::bigint as id, N.xmin as state_number, nspname as name, D.description, pg_catalog.pg_get_userbyid(N.nspowner) as "owner" from pg_catalog.pg_namespace N left join pg_catalog.pg_description D on N.oid = D.objoid order by case when nspname = pg_catalog.current_schema() then -1::bigint else N.oid::bigint end
