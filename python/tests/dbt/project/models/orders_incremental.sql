{{ config(materialized='incremental', unique_key='id') }}
select id, customer, amount, ordered_at from {{ ref('orders') }}
{% if is_incremental() %}
where ordered_at >= (select coalesce(max(ordered_at), '1900-01-01') from {{ this }})
{% endif %}
