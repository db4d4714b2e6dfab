// Calls the java.sql.DatabaseMetaData methods tools such as DBeaver, DataGrip, Liquibase
// and Metabase call at start-up, through pgjdbc, and prints one line per call: its name,
// OK and what it returned (row count and the rows' first columns for the calls about the
// test's own objects), or ERROR and the message. python/tests/test_jdbc.py runs it against
// tierdb and PostgreSQL 15 and compares the lines.
import java.sql.*;
import java.util.*;

public class MetaCheck {
    interface Call { ResultSet run(DatabaseMetaData md) throws SQLException; }

    static String rows(ResultSet rs, int keep) throws SQLException {
        ResultSetMetaData m = rs.getMetaData();
        List<String> out = new ArrayList<>();
        int n = 0;
        while (rs.next()) {
            n++;
            if (keep > 0) {
                List<String> r = new ArrayList<>();
                for (int i = 1; i <= Math.min(keep, m.getColumnCount()); i++) r.add(String.valueOf(rs.getString(i)));
                out.add(String.join("|", r));
            }
        }
        Collections.sort(out);
        return "rows=" + n + (keep > 0 ? " " + out : "") + " columns=" + m.getColumnCount();
    }

    static void check(DatabaseMetaData md, String name, int keep, Call c) {
        try (ResultSet rs = c.run(md)) {
            System.out.println(name + ": OK " + rows(rs, keep));
        } catch (Exception e) {
            System.out.println(name + ": ERROR " + e.getMessage().replace('\n', ' '));
        }
    }

    public static void main(String[] a) throws Exception {
        try (Connection c = DriverManager.getConnection(a[0], a[1], a[2])) {
            DatabaseMetaData md = c.getMetaData();
            // Counted, not listed: PostgreSQL has more types and schemas than tierdb.
            check(md, "getTypeInfo", 0, m -> m.getTypeInfo());
            check(md, "getCatalogs", 0, m -> m.getCatalogs());
            check(md, "getTableTypes", 0, m -> m.getTableTypes());
            check(md, "getSchemas", 0, m -> m.getSchemas());
            check(md, "getClientInfoProperties", 0, m -> m.getClientInfoProperties());
            // The test's own objects: listed (their names, the first columns).
            check(md, "getSchemas(public)", 1, m -> m.getSchemas(null, "public"));
            check(md, "getTables", 4, m -> m.getTables(null, "public", "meta%", null));
            check(md, "getTables(TABLE)", 4, m -> m.getTables(null, "public", "meta%", new String[] {"TABLE"}));
            check(md, "getColumns", 7, m -> m.getColumns(null, "public", "meta_t", "%"));
            check(md, "getPrimaryKeys", 6, m -> m.getPrimaryKeys(null, "public", "meta_t"));
            check(md, "getIndexInfo", 9, m -> m.getIndexInfo(null, "public", "meta_t", false, true));
            check(md, "getImportedKeys", 4, m -> m.getImportedKeys(null, "public", "meta_t"));
            check(md, "getExportedKeys", 4, m -> m.getExportedKeys(null, "public", "meta_t"));
            check(md, "getBestRowIdentifier", 2, m -> m.getBestRowIdentifier(null, "public", "meta_t", DatabaseMetaData.bestRowSession, true));
            check(md, "getVersionColumns", 2, m -> m.getVersionColumns(null, "public", "meta_t"));
            check(md, "getTablePrivileges", 0, m -> m.getTablePrivileges(null, "public", "meta_t"));
            check(md, "getColumnPrivileges", 0, m -> m.getColumnPrivileges(null, "public", "meta_t", "%"));
            check(md, "getProcedures", 3, m -> m.getProcedures(null, "public", "meta%"));
            check(md, "getFunctions", 3, m -> m.getFunctions(null, "public", "meta%"));
            check(md, "getUDTs", 3, m -> m.getUDTs(null, "public", "meta%", null));
            check(md, "getSuperTables", 0, m -> m.getSuperTables(null, "public", "meta_t"));
            System.out.println("getDatabaseProductName: " + md.getDatabaseProductName());
            System.out.println("getIdentifierQuoteString: " + md.getIdentifierQuoteString());
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT id, v, id + 1 AS w FROM meta_t")) {
                ResultSetMetaData m = rs.getMetaData();
                List<String> cols = new ArrayList<>();
                for (int i = 1; i <= m.getColumnCount(); i++)
                    cols.add(m.getColumnName(i) + "/" + m.getTableName(i) + "/" + m.getColumnTypeName(i) + "/" + m.isNullable(i));
                System.out.println("ResultSetMetaData: OK " + cols);
            } catch (Exception e) {
                System.out.println("ResultSetMetaData: ERROR " + e.getMessage().replace('\n', ' '));
            }
        }
    }
}
