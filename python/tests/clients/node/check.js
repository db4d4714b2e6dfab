// What an application using node-postgres (`pg`) does against a PostgreSQL server, one
// line per step: its name, then what the driver handed back (JavaScript values and
// their types, the RowDescription fields it read, error codes). python/tests/test_clients.py
// runs it against tierdb and PostgreSQL 15 with TZ=America/New_York (node-postgres
// converts timestamps through the process's zone) and compares the lines.
//   node check.js HOST PORT USER PASSWORD DATABASE
'use strict';
const { Client } = require('pg');

function show(v) {
  if (v === null || v === undefined) return String(v);
  if (v instanceof Date) return `Date(${v.toISOString()})`;
  if (Buffer.isBuffer(v)) return `Buffer(${v.toString('hex')})`;
  if (typeof v === 'object') return `${Array.isArray(v) ? 'array' : 'object'}(${JSON.stringify(v)})`;
  return `${typeof v}(${v})`;
}

async function step(client, name, fn) {
  try {
    console.log(`${name}: ${await fn(client)}`);
  } catch (e) {
    console.log(`${name}: ERROR ${e.code} ${e.constraint || ''}`.trimEnd());
  }
}

function fields(r, tableOid) {
  return r.fields.map((f) => [f.name, f.dataTypeID, f.dataTypeModifier,
    f.tableID === tableOid ? 'table' : f.tableID, f.columnID].join('/')).join(' ');
}

function rows(r) {
  return r.rows.map((row) => Object.values(row).map(show).join(',')).join(' ; ');
}

async function main() {
  const [host, port, user, password, database] = process.argv.slice(2);
  const client = new Client({ host, port: Number(port), user, password, database });
  await client.connect();
  const oid = (await client.query(
    "SELECT oid FROM pg_catalog.pg_class WHERE relname = 'cl_t'")).rows[0].oid;

  await step(client, 'select 1', async (c) => {
    const r = await c.query('SELECT 1 AS one, 1.5 AS num, 30000000000::float8 AS f, '
      + "9223372036854775807 AS big, 'x' AS lit, true AS t, NULL::int AS nothing");
    return `${fields(r)} | ${rows(r)}`;
  });
  await step(client, 'now()', async (c) => {
    const r = await c.query('SELECT now() AS t, current_date AS d');
    const t = r.rows[0].t;
    return `${fields(r)} | Date=${t instanceof Date} near=${Math.abs(Date.now() - t.getTime()) < 3600e3}`;
  });
  await step(client, 'insert with parameters', async (c) => {
    const values = [
      [1, 'hello', '0.01', new Date('2024-05-17T10:00:00.123Z'), Buffer.from([0, 1, 255]),
        { a: [1, 2.5], b: 'x' }, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '2024-05-17', 30000000000, 7,
        '9007199254740993', '10:11:12', new Date(2024, 0, 2, 3, 4, 5)],
      [2, 'world', '-0.05', new Date('1999-12-31T23:59:59Z'), Buffer.alloc(0), JSON.stringify([1, 'two']),
        null, new Date(2000, 1, 29), 0.1, -32768, '-9223372036854775808', null, null],
      [3, 'zero', '0.00', null, null, null, null, null, null, null, null, null, null],
    ];
    let n = 0;
    for (const v of values) {
      const r = await c.query('INSERT INTO cl_t (id, v, n, ts, b, j, u, d, f, s, big, tm, wall) '
        + 'VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)', v);
      n += r.rowCount;
    }
    return `rowCount=${n}`;
  });
  await step(client, 'select the rows (extended protocol)', async (c) => {
    const r = await c.query('SELECT * FROM cl_t WHERE id > $1 ORDER BY id', [0]);
    return `${fields(r, oid)} | ${rows(r)}`;
  });
  await step(client, 'select the rows (simple protocol)', async (c) => {
    const r = await c.query('SELECT id, v, n, ts, b, j, u, d, f, s, big, tm, wall FROM cl_t ORDER BY id');
    return `${fields(r, oid)} | ${rows(r)}`;
  });
  await step(client, 'numeric parameters', async (c) => {
    const out = [];
    for (const x of ['0.00', '0.01', '-0.05', '12345678.99', '1e3']) {
      out.push(show((await c.query('SELECT $1::numeric(10,2) AS x', [x])).rows[0].x));
    }
    return out.join(',');
  });
  await step(client, 'a timestamptz parameter compared', async (c) => {
    const r = await c.query('SELECT id FROM cl_t WHERE ts = $1', [new Date('2024-05-17T10:00:00.123Z')]);
    return rows(r);
  });
  await step(client, 'named prepared statement, twice', async (c) => {
    const q = { name: 'by_id', text: 'SELECT v, n FROM cl_t WHERE id = $1' };
    const a = await c.query({ ...q, values: [1] });
    const b = await c.query({ ...q, values: [2] });
    return `${rows(a)} / ${rows(b)} / ${fields(b, oid)}`;
  });
  await step(client, 'duplicate key', (c) => c.query("INSERT INTO cl_t (id, v) VALUES (1, 'again')"));
  await step(client, 'not null', (c) => c.query('INSERT INTO cl_t (id, v) VALUES (9, NULL)'));
  await step(client, 'too long for varchar(20)', (c) => c.query('INSERT INTO cl_t (id, v) VALUES (9, $1)', ['x'.repeat(21)]));
  await step(client, 'division by zero', (c) => c.query('SELECT 1 / 0'));
  await step(client, 'syntax error', (c) => c.query('SELEC 1'));
  await step(client, 'transaction rolled back', async (c) => {
    await c.query('BEGIN');
    await c.query("INSERT INTO cl_t (id, v) VALUES (10, 'gone')");
    const inside = (await c.query('SELECT count(*) AS n FROM cl_t')).rows[0].n;
    await c.query('ROLLBACK');
    const after = (await c.query('SELECT count(*) AS n FROM cl_t')).rows[0].n;
    return `inside=${show(inside)} after=${show(after)}`;
  });
  await step(client, 'transaction aborted by an error', async (c) => {
    await c.query('BEGIN');
    await c.query("INSERT INTO cl_t (id, v) VALUES (11, 'gone')");
    let code = '';
    try { await c.query('SELECT 1 / 0'); } catch (e) { code = e.code; }
    try { await c.query('SELECT 1'); } catch (e) { code += ` then ${e.code}`; }
    await c.query('COMMIT');
    const after = (await c.query('SELECT count(*) AS n FROM cl_t WHERE id = 11')).rows[0].n;
    return `${code} after=${show(after)}`;
  });
  await step(client, 'update and delete counts', async (c) => {
    const u = await c.query("UPDATE cl_t SET v = v || '!' WHERE id IN (SELECT id FROM cl_t WHERE id >= 2)");
    const d = await c.query('DELETE FROM cl_t WHERE id = $1', [3]);
    return `${u.command} ${u.rowCount} ${d.command} ${d.rowCount}`;
  });
  await client.end();
}

main().catch((e) => { console.error(e); process.exit(1); });
