//! The Star Schema Benchmark (O'Neil, O'Neil, Chen: "Star Schema Benchmark", revision 3):
//! the five tables' definitions, a generator that writes them as dbgen does (`.tbl`,
//! `|`-delimited with a trailing `|`), and the 13 queries.
//!
//! The generator follows the specification's cardinalities and value domains (those the
//! queries select on: regions, nations, cities, manufacturer/category/brand, years, months,
//! weeks, discounts, quantities); free text (names, addresses, phones) is random filler of
//! the specified shape. It is deterministic for a scale factor: the same `--sf` writes the
//! same files, in parallel chunks (`lineorder.tbl.1`, `.2`…).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{Datelike, NaiveDate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{BenchError, Result};

pub const TABLES: [&str; 5] = ["date", "customer", "supplier", "part", "lineorder"];

/// Table definitions, with the sort keys tierdb uses ("sorted" loads). `sorted = false`
/// gives the same tables without keys (loaded in file order).
///
/// Types as the specification's value domains imply: 32-bit integers wherever the values
/// fit at every scale factor (prices are at most 50 × 2,100.00 in cents, order totals
/// 7 lines of that), `lo_orderkey` 64-bit (it passes 2^31 above SF 350; no query reads it).
pub fn ddl(sorted: bool) -> Vec<(String, String)> {
    let key = |k: &str| {
        if sorted {
            format!(" ORDER BY ({k})")
        } else {
            String::new()
        }
    };
    vec![
        (
            "date".into(),
            format!(
                "CREATE TABLE date (d_datekey INT NOT NULL, d_date VARCHAR NOT NULL, \
                 d_dayofweek VARCHAR NOT NULL, d_month VARCHAR NOT NULL, d_year INT NOT NULL, \
                 d_yearmonthnum INT NOT NULL, d_yearmonth VARCHAR NOT NULL, \
                 d_daynuminweek INT NOT NULL, d_daynuminmonth INT NOT NULL, \
                 d_daynuminyear INT NOT NULL, d_monthnuminyear INT NOT NULL, \
                 d_weeknuminyear INT NOT NULL, d_sellingseason VARCHAR NOT NULL, \
                 d_lastdayinweekfl VARCHAR NOT NULL, d_lastdayinmonthfl VARCHAR NOT NULL, \
                 d_holidayfl VARCHAR NOT NULL, d_weekdayfl VARCHAR NOT NULL){}",
                key("d_datekey")
            ),
        ),
        (
            "customer".into(),
            format!(
                "CREATE TABLE customer (c_custkey INT NOT NULL, c_name VARCHAR NOT NULL, \
                 c_address VARCHAR NOT NULL, c_city VARCHAR NOT NULL, c_nation VARCHAR NOT NULL, \
                 c_region VARCHAR NOT NULL, c_phone VARCHAR NOT NULL, \
                 c_mktsegment VARCHAR NOT NULL){}",
                key("c_custkey")
            ),
        ),
        (
            "supplier".into(),
            format!(
                "CREATE TABLE supplier (s_suppkey INT NOT NULL, s_name VARCHAR NOT NULL, \
                 s_address VARCHAR NOT NULL, s_city VARCHAR NOT NULL, s_nation VARCHAR NOT NULL, \
                 s_region VARCHAR NOT NULL, s_phone VARCHAR NOT NULL){}",
                key("s_suppkey")
            ),
        ),
        (
            "part".into(),
            format!(
                "CREATE TABLE part (p_partkey INT NOT NULL, p_name VARCHAR NOT NULL, \
                 p_mfgr VARCHAR NOT NULL, p_category VARCHAR NOT NULL, p_brand1 VARCHAR NOT NULL, \
                 p_color VARCHAR NOT NULL, p_type VARCHAR NOT NULL, p_size INT NOT NULL, \
                 p_container VARCHAR NOT NULL){}",
                key("p_partkey")
            ),
        ),
        (
            "lineorder".into(),
            format!(
                "CREATE TABLE lineorder (lo_orderkey BIGINT NOT NULL, lo_linenumber INT NOT NULL, \
                 lo_custkey INT NOT NULL, lo_partkey INT NOT NULL, lo_suppkey INT NOT NULL, \
                 lo_orderdate INT NOT NULL, lo_orderpriority VARCHAR NOT NULL, \
                 lo_shippriority VARCHAR NOT NULL, lo_quantity INT NOT NULL, \
                 lo_extendedprice INT NOT NULL, lo_ordtotalprice INT NOT NULL, \
                 lo_discount INT NOT NULL, lo_revenue INT NOT NULL, \
                 lo_supplycost INT NOT NULL, lo_tax INT NOT NULL, lo_commitdate INT NOT NULL, \
                 lo_shipmode VARCHAR NOT NULL){}",
                key("lo_orderdate")
            ),
        ),
    ]
}

/// The 13 queries, as the specification states them (with `date` for DATE).
pub const QUERIES: [(&str, &str); 13] = [
    (
        "Q1.1",
        "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM lineorder, date WHERE lo_orderdate = d_datekey AND d_year = 1993 AND lo_discount BETWEEN 1 AND 3 AND lo_quantity < 25",
    ),
    (
        "Q1.2",
        "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM lineorder, date WHERE lo_orderdate = d_datekey AND d_yearmonthnum = 199401 AND lo_discount BETWEEN 4 AND 6 AND lo_quantity BETWEEN 26 AND 35",
    ),
    (
        "Q1.3",
        "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM lineorder, date WHERE lo_orderdate = d_datekey AND d_weeknuminyear = 6 AND d_year = 1994 AND lo_discount BETWEEN 5 AND 7 AND lo_quantity BETWEEN 26 AND 35",
    ),
    (
        "Q2.1",
        "SELECT sum(lo_revenue) AS revenue, d_year, p_brand1 FROM lineorder, date, part, supplier WHERE lo_orderdate = d_datekey AND lo_partkey = p_partkey AND lo_suppkey = s_suppkey AND p_category = 'MFGR#12' AND s_region = 'AMERICA' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    ),
    (
        "Q2.2",
        "SELECT sum(lo_revenue) AS revenue, d_year, p_brand1 FROM lineorder, date, part, supplier WHERE lo_orderdate = d_datekey AND lo_partkey = p_partkey AND lo_suppkey = s_suppkey AND p_brand1 BETWEEN 'MFGR#2221' AND 'MFGR#2228' AND s_region = 'ASIA' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    ),
    (
        "Q2.3",
        "SELECT sum(lo_revenue) AS revenue, d_year, p_brand1 FROM lineorder, date, part, supplier WHERE lo_orderdate = d_datekey AND lo_partkey = p_partkey AND lo_suppkey = s_suppkey AND p_brand1 = 'MFGR#2239' AND s_region = 'EUROPE' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    ),
    (
        "Q3.1",
        "SELECT c_nation, s_nation, d_year, sum(lo_revenue) AS revenue FROM customer, lineorder, supplier, date WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey AND c_region = 'ASIA' AND s_region = 'ASIA' AND d_year >= 1992 AND d_year <= 1997 GROUP BY c_nation, s_nation, d_year ORDER BY d_year ASC, revenue DESC",
    ),
    (
        "Q3.2",
        "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM customer, lineorder, supplier, date WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey AND c_nation = 'UNITED STATES' AND s_nation = 'UNITED STATES' AND d_year >= 1992 AND d_year <= 1997 GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    ),
    (
        "Q3.3",
        "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM customer, lineorder, supplier, date WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey AND (c_city = 'UNITED KI1' OR c_city = 'UNITED KI5') AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') AND d_year >= 1992 AND d_year <= 1997 GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    ),
    (
        "Q3.4",
        "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM customer, lineorder, supplier, date WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey AND (c_city = 'UNITED KI1' OR c_city = 'UNITED KI5') AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') AND d_yearmonth = 'Dec1997' GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    ),
    (
        "Q4.1",
        "SELECT d_year, c_nation, sum(lo_revenue - lo_supplycost) AS profit FROM date, customer, supplier, part, lineorder WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_partkey = p_partkey AND lo_orderdate = d_datekey AND c_region = 'AMERICA' AND s_region = 'AMERICA' AND (p_mfgr = 'MFGR#1' OR p_mfgr = 'MFGR#2') GROUP BY d_year, c_nation ORDER BY d_year, c_nation",
    ),
    (
        "Q4.2",
        "SELECT d_year, s_nation, p_category, sum(lo_revenue - lo_supplycost) AS profit FROM date, customer, supplier, part, lineorder WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_partkey = p_partkey AND lo_orderdate = d_datekey AND c_region = 'AMERICA' AND s_region = 'AMERICA' AND (d_year = 1997 OR d_year = 1998) AND (p_mfgr = 'MFGR#1' OR p_mfgr = 'MFGR#2') GROUP BY d_year, s_nation, p_category ORDER BY d_year, s_nation, p_category",
    ),
    (
        "Q4.3",
        "SELECT d_year, s_city, p_brand1, sum(lo_revenue - lo_supplycost) AS profit FROM date, customer, supplier, part, lineorder WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_partkey = p_partkey AND lo_orderdate = d_datekey AND s_nation = 'UNITED STATES' AND d_year >= 1997 AND d_year <= 1998 AND p_category = 'MFGR#14' GROUP BY d_year, s_city, p_brand1 ORDER BY d_year, s_city, p_brand1",
    ),
];

const NATIONS: [(&str, usize); 25] = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
];
const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];
const SEGMENTS: [&str; 5] = [
    "AUTOMOBILE",
    "BUILDING",
    "FURNITURE",
    "MACHINERY",
    "HOUSEHOLD",
];
const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECI", "5-LOW"];
const SHIPMODES: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];
const TYPE1: [&str; 6] = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"];
const TYPE2: [&str; 5] = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"];
const TYPE3: [&str; 5] = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"];
const CONTAINER1: [&str; 5] = ["SM", "LG", "MED", "JUMBO", "WRAP"];
const CONTAINER2: [&str; 8] = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"];
const COLORS: [&str; 92] = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Row counts at scale factor `sf` (the specification's).
pub fn cardinalities(sf: f64) -> [(&'static str, u64); 5] {
    let parts = 200_000.0 * (1.0 + sf.max(1.0).log2().floor());
    [
        ("date", 2556),
        ("customer", (30_000.0 * sf).round().max(1.0) as u64),
        ("supplier", (2_000.0 * sf).round().max(1.0) as u64),
        ("part", parts as u64),
        (
            "orders (lineorder has 1-7 lines each)",
            (1_500_000.0 * sf).round().max(1.0) as u64,
        ),
    ]
}

/// Bytes written so far (for a progress bar).
#[derive(Debug, Default)]
pub struct GenProgress {
    pub orders_total: AtomicU64,
    pub orders_done: AtomicU64,
}

/// Writes the five tables for scale factor `sf` into `dir`, lineorder in `chunks` files
/// generated in parallel. Returns the files written.
pub fn generate(
    sf: f64,
    dir: &Path,
    chunks: usize,
    progress: &GenProgress,
) -> Result<Vec<PathBuf>> {
    if !(sf > 0.0 && sf <= 10_000.0) {
        return Err(BenchError::input(format!(
            "scale factor {sf} is out of range (give a number > 0, e.g. 0.1, 1 or 10)"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let [_, (_, customers), (_, suppliers), (_, parts), (_, orders)] = cardinalities(sf);
    let mut files = vec![
        write_date(dir)?,
        write_customer(dir, customers)?,
        write_supplier(dir, suppliers)?,
        write_part(dir, parts)?,
    ];
    progress.orders_total.store(orders, Ordering::Relaxed);
    let chunks = chunks.clamp(1, 64) as u64;
    let per = orders.div_ceil(chunks);
    let results: Vec<Result<PathBuf>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..chunks)
            .map(|c| {
                let start = c * per + 1;
                let end = ((c + 1) * per).min(orders);
                s.spawn(move || {
                    write_lineorder(
                        dir,
                        c + 1,
                        start,
                        end,
                        customers,
                        suppliers,
                        parts,
                        progress,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::bug("the generator thread panicked")))
            })
            .collect()
    });
    for r in results {
        files.push(r?);
    }
    Ok(files)
}

fn create(dir: &Path, name: &str) -> Result<(PathBuf, BufWriter<File>)> {
    let path = dir.join(name);
    let f = File::create(&path)
        .map_err(|e| BenchError::input(format!("cannot create {}: {e}", path.display())))?;
    Ok((path, BufWriter::with_capacity(1 << 20, f)))
}

fn text(rng: &mut StdRng, min: usize, max: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.";
    let n = rng.random_range(min..=max);
    (0..n)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

fn phone(rng: &mut StdRng, nation: usize) -> String {
    format!(
        "{}-{}-{}-{}",
        nation + 10,
        rng.random_range(100..1000),
        rng.random_range(100..1000),
        rng.random_range(1000..10000)
    )
}

fn city(nation: &str, rng: &mut StdRng) -> String {
    format!("{:<9.9}{}", nation, rng.random_range(0..10))
}

fn write_date(dir: &Path) -> Result<PathBuf> {
    let (path, mut w) = create(dir, "date.tbl")?;
    let mut d = NaiveDate::from_ymd_opt(1992, 1, 1)
        .ok_or_else(|| BenchError::bug("1992-01-01 is not a date"))?;
    for _ in 0..2556 {
        let next = d.succ_opt().unwrap_or(d);
        let month = d.month() as usize;
        let dow = d.weekday().num_days_from_sunday() as usize; // Sunday = 0
        let season = match month {
            12 => "Christmas",
            6..=8 => "Summer",
            1 | 2 => "Winter",
            3..=5 => "Spring",
            _ => "Fall",
        };
        let holiday = matches!(
            (month, d.day()),
            (1, 1) | (7, 4) | (11, 11) | (12, 25) | (12, 31)
        );
        writeln!(
            w,
            "{}|{} {}, {}|{}|{}|{}|{}|{}{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|",
            d.year() * 10000 + month as i32 * 100 + d.day() as i32,
            MONTHS[month - 1],
            d.day(),
            d.year(),
            DAYS[dow],
            MONTHS[month - 1],
            d.year(),
            d.year() * 100 + month as i32,
            &MONTHS[month - 1][..3],
            d.year(),
            dow + 1,
            d.day(),
            d.ordinal(),
            month,
            (d.ordinal() - 1) / 7 + 1,
            season,
            u8::from(dow == 6),
            u8::from(next.month() != d.month()),
            u8::from(holiday),
            u8::from((1..=5).contains(&dow)),
        )?;
        d = next;
    }
    w.flush()?;
    Ok(path)
}

fn write_customer(dir: &Path, n: u64) -> Result<PathBuf> {
    let (path, mut w) = create(dir, "customer.tbl")?;
    let mut rng = StdRng::seed_from_u64(0x5eed_c057);
    for k in 1..=n {
        let nation = rng.random_range(0..25);
        let (name, region) = NATIONS[nation];
        writeln!(
            w,
            "{k}|Customer#{k:09}|{}|{}|{name}|{}|{}|{}|",
            text(&mut rng, 10, 25),
            city(name, &mut rng),
            REGIONS[region],
            phone(&mut rng, nation),
            SEGMENTS[rng.random_range(0..5)]
        )?;
    }
    w.flush()?;
    Ok(path)
}

fn write_supplier(dir: &Path, n: u64) -> Result<PathBuf> {
    let (path, mut w) = create(dir, "supplier.tbl")?;
    let mut rng = StdRng::seed_from_u64(0x5eed_5011);
    for k in 1..=n {
        let nation = rng.random_range(0..25);
        let (name, region) = NATIONS[nation];
        writeln!(
            w,
            "{k}|Supplier#{k:09}|{}|{}|{name}|{}|{}|",
            text(&mut rng, 10, 25),
            city(name, &mut rng),
            REGIONS[region],
            phone(&mut rng, nation)
        )?;
    }
    w.flush()?;
    Ok(path)
}

fn write_part(dir: &Path, n: u64) -> Result<PathBuf> {
    let (path, mut w) = create(dir, "part.tbl")?;
    let mut rng = StdRng::seed_from_u64(0x5eed_9a27);
    for k in 1..=n {
        let m = rng.random_range(1..=5);
        let c = rng.random_range(1..=5);
        let b = rng.random_range(1..=40);
        writeln!(
            w,
            "{k}|{} {}|MFGR#{m}|MFGR#{m}{c}|MFGR#{m}{c}{b}|{}|{} {} {}|{}|{} {}|",
            COLORS[rng.random_range(0..COLORS.len())],
            COLORS[rng.random_range(0..COLORS.len())],
            COLORS[rng.random_range(0..COLORS.len())],
            TYPE1[rng.random_range(0..TYPE1.len())],
            TYPE2[rng.random_range(0..TYPE2.len())],
            TYPE3[rng.random_range(0..TYPE3.len())],
            rng.random_range(1..=50),
            CONTAINER1[rng.random_range(0..CONTAINER1.len())],
            CONTAINER2[rng.random_range(0..CONTAINER2.len())],
        )?;
    }
    w.flush()?;
    Ok(path)
}

/// TPC-H's retail price of a part, in cents.
fn retail_cents(partkey: u64) -> i64 {
    (90_000 + ((partkey / 10) % 20_001) + 100 * (partkey % 1000)) as i64
}

#[allow(clippy::too_many_arguments)]
fn write_lineorder(
    dir: &Path,
    chunk: u64,
    first: u64,
    last: u64,
    customers: u64,
    suppliers: u64,
    parts: u64,
    progress: &GenProgress,
) -> Result<PathBuf> {
    let (path, mut w) = create(dir, &format!("lineorder.tbl.{chunk}"))?;
    let mut rng = StdRng::seed_from_u64(0x5eed_0000 ^ chunk.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let start = NaiveDate::from_ymd_opt(1992, 1, 1)
        .ok_or_else(|| BenchError::bug("1992-01-01 is not a date"))?;
    // Orders are dated up to 151 days before the end of 1998 (TPC-H's rule).
    let span = 2556 - 151;
    let datekey = |d: NaiveDate| d.year() * 10000 + d.month() as i32 * 100 + d.day() as i32;
    struct Line {
        part: u64,
        supp: u64,
        qty: i64,
        price: i64,
        discount: i64,
        tax: i64,
        commit: i32,
        mode: &'static str,
    }
    let mut lines = Vec::with_capacity(7);
    for order in first..=last {
        // Sparse order keys as in TPC-H (8 of every 32).
        let orderkey = (order - 1) / 8 * 32 + (order - 1) % 8 + 1;
        let cust = rng.random_range(1..=customers);
        let date = start + chrono::Duration::days(rng.random_range(0..span));
        let priority = PRIORITIES[rng.random_range(0..5)];
        lines.clear();
        let mut total = 0i64;
        for _ in 0..rng.random_range(1..=7) {
            let part = rng.random_range(1..=parts);
            let qty = rng.random_range(1..=50);
            let price = qty * retail_cents(part);
            let discount = rng.random_range(0..=10);
            let tax = rng.random_range(0..=8);
            total += price * (100 - discount) / 100 * (100 + tax) / 100;
            lines.push(Line {
                part,
                supp: rng.random_range(1..=suppliers),
                qty,
                price,
                discount,
                tax,
                commit: datekey(date + chrono::Duration::days(rng.random_range(30..=90))),
                mode: SHIPMODES[rng.random_range(0..SHIPMODES.len())],
            });
        }
        for (i, l) in lines.iter().enumerate() {
            writeln!(
                w,
                "{orderkey}|{}|{cust}|{}|{}|{}|{priority}|0|{}|{}|{total}|{}|{}|{}|{}|{}|{}|",
                i + 1,
                l.part,
                l.supp,
                datekey(date),
                l.qty,
                l.price,
                l.discount,
                l.price * (100 - l.discount) / 100,
                6 * retail_cents(l.part) / 10,
                l.tax,
                l.commit,
                l.mode,
            )?;
        }
        if order % 4096 == 0 {
            progress.orders_done.fetch_add(4096, Ordering::Relaxed);
        }
    }
    progress
        .orders_done
        .fetch_add((last + 1 - first) % 4096, Ordering::Relaxed);
    w.flush()?;
    Ok(path)
}

/// The table a generated file belongs to (`lineorder.tbl.3` → `lineorder`).
pub fn table_of(file: &Path) -> Option<&'static str> {
    let name = file.file_name()?.to_str()?;
    let stem = name.split('.').next()?;
    TABLES.iter().copied().find(|t| *t == stem)
}

/// The generated files in `dir`, by table.
pub fn files_in(dir: &Path) -> Result<Vec<(&'static str, Vec<PathBuf>)>> {
    let mut out: Vec<(&'static str, Vec<PathBuf>)> =
        TABLES.iter().map(|t| (*t, Vec::new())).collect();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| BenchError::input(format!("cannot read {}: {e}", dir.display())))?;
    for e in entries {
        let p = e?.path();
        if let Some(t) = table_of(&p)
            && let Some(slot) = out.iter_mut().find(|(n, _)| *n == t)
        {
            slot.1.push(p);
        }
    }
    for (t, files) in &mut out {
        if files.is_empty() {
            return Err(BenchError::input(format!(
                "{}: no {t}.tbl file; write them with: tierdb ssb generate --sf N {}",
                dir.display(),
                dir.display()
            )));
        }
        files.sort();
    }
    Ok(out)
}

/// Shared between the CLI and the benchmark: counts as the progress bar reads them.
pub type SharedGenProgress = Arc<GenProgress>;
