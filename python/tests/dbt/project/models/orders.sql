{{ config(materialized='table') }}
select id, customer, amount, ordered_at from {{ ref('raw_orders') }}
