{{ config(materialized='view') }}
select customer, count(*) as orders, sum(amount) as total
from {{ ref('orders') }}
group by customer
