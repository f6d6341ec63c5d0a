// Test helpers for SQLite files: a temporary directory and a raw connection
// for setting up files and checking what the backend wrote.
#ifndef JOBPACT_TESTS_BACKENDS_SQLITE_SQLITE_TEST_FILES_H_
#define JOBPACT_TESTS_BACKENDS_SQLITE_SQLITE_TEST_FILES_H_

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace jobpact {
namespace sqlite {

// A fresh temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "jobpact_sqlite_test_XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A raw SQLite connection, for setting up files and checking what the
// backend wrote.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) ADD_FAILURE() << sqlite3_errmsg(db_);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  sqlite3* get() const { return db_; }
  // Runs SQL; returns SQLite's code.
  int Exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    return rc;
  }
  // The first column of the first row as text ("" if none or an error).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_SQLITE_SQLITE_TEST_FILES_H_
