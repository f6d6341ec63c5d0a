// Keeps documentation honest: every ```cpp block of a Markdown page must
// appear verbatim (modulo indentation and blank lines) in a test source, so
// the page cannot drift from code that compiles and passes.
#ifndef JOBPACT_TESTS_DOCS_DOC_BLOCKS_H_
#define JOBPACT_TESTS_DOCS_DOC_BLOCKS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace jobpact {
namespace doc_blocks {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The non-blank lines of `text`, each without leading and trailing blanks.
inline std::vector<std::string> NormalizedLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const auto e = line.find_last_not_of(" \t\r");
    out.push_back(line.substr(b, e - b + 1));
  }
  return out;
}

// The source tree's root, with a trailing '/': JOBPACT_SOURCE_DIR, set by
// tests/CMakeLists.txt (__FILE__ may be relative, e.g. under ccache).
inline std::string SourceRoot() { return JOBPACT_SOURCE_DIR; }

// Expects each ```cpp block of `doc_path` to stand in `source_path`, and at
// least `min_blocks` blocks.
inline void ExpectEveryCodeBlockIn(const std::string& doc_path, const std::string& source_path,
                                   int min_blocks) {
  const std::string doc = ReadFile(doc_path);
  const std::string source = ReadFile(source_path);
  ASSERT_FALSE(doc.empty()) << "cannot read " << doc_path;
  ASSERT_FALSE(source.empty()) << "cannot read " << source_path;
  const std::vector<std::string> code = NormalizedLines(source);
  int blocks = 0;
  std::size_t at = 0;
  while ((at = doc.find("```cpp\n", at)) != std::string::npos) {
    const std::size_t begin = at + 7;
    const std::size_t end = doc.find("```", begin);
    ASSERT_NE(end, std::string::npos) << doc_path << ": unterminated code block";
    // #include lines may stand anywhere in the source (at its top); the
    // rest of the block must stand there as one run of lines.
    std::vector<std::string> block;
    for (std::string& line : NormalizedLines(doc.substr(begin, end - begin))) {
      if (line.rfind("#include", 0) == 0) {
        EXPECT_NE(std::find(code.begin(), code.end(), line), code.end())
            << doc_path << ": " << line << " is not in " << source_path;
      } else {
        block.push_back(std::move(line));
      }
    }
    ++blocks;
    bool found = block.empty();
    for (std::size_t i = 0; !found && i + block.size() <= code.size(); ++i) {
      found = std::equal(block.begin(), block.end(), code.begin() + static_cast<long>(i));
    }
    EXPECT_TRUE(found) << doc_path << " code block #" << blocks << " is not in " << source_path
                       << "; it starts with: " << (block.empty() ? "" : block.front());
    at = end + 3;
  }
  EXPECT_GE(blocks, min_blocks) << doc_path;
}

}  // namespace doc_blocks
}  // namespace jobpact

#endif  // JOBPACT_TESTS_DOCS_DOC_BLOCKS_H_
