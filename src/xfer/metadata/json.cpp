// A small JSON reader (RFC 8259) for etcd's gateway replies, plus base64 (RFC 4648) for its keys and values.
#include <array>

#include "xfer/metadata/http.hpp"

namespace rdmakit::xfer::metadata {
namespace json {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  Result<Value> document() {
    auto value = read(0);
    if (!value) return value;
    skip_space();
    if (at_ != text_.size()) return bad("bytes after the value");
    return value;
  }

 private:
  std::unexpected<Error> bad(std::string_view why) const {
    return fail(Errc::ProtocolError,
                "malformed JSON at byte " + std::to_string(at_) + ": " + std::string(why));
  }

  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t'))
      ++at_;
  }

  bool take(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  Result<Value> read(int depth) {
    if (depth > kMaxDepth) return bad("nested too deep");
    skip_space();
    if (at_ >= text_.size()) return bad("a value expected");
    char c = text_[at_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      Value value{Value::Kind::String};
      auto text = string();
      if (!text) return std::unexpected(text.error());
      value.text = std::move(*text);
      return value;
    }
    for (auto [word, kind] :
         {std::pair{"true", Value::Kind::Bool}, {"false", Value::Kind::Bool}, {"null", Value::Kind::Null}}) {
      if (text_.substr(at_).starts_with(word)) {
        at_ += std::string_view(word).size();
        return Value{kind, kind == Value::Kind::Bool ? word : ""};
      }
    }
    return number();
  }

  Result<Value> object(int depth) {
    ++at_;
    Value value{Value::Kind::Object};
    if (take('}')) return value;
    do {
      skip_space();
      if (at_ >= text_.size() || text_[at_] != '"') return bad("a member name expected");
      auto name = string();
      if (!name) return std::unexpected(name.error());
      if (!take(':')) return bad("':' expected");
      auto member = read(depth + 1);
      if (!member) return member;
      value.members.push_back(Member{std::move(*name), std::move(*member)});
    } while (take(','));
    if (!take('}')) return bad("'}' expected");
    return value;
  }

  Result<Value> array(int depth) {
    ++at_;
    Value value{Value::Kind::Array};
    if (take(']')) return value;
    do {
      auto element = read(depth + 1);
      if (!element) return element;
      value.elements.push_back(std::move(*element));
    } while (take(','));
    if (!take(']')) return bad("']' expected");
    return value;
  }

  Result<Value> number() {
    std::size_t start = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    std::size_t digits = at_;
    while (at_ < text_.size() &&
           std::string_view("0123456789.eE+-").find(text_[at_]) != std::string_view::npos)
      ++at_;
    if (at_ == digits || text_[digits] < '0' || text_[digits] > '9') return bad("a value expected");
    return Value{Value::Kind::Number, std::string(text_.substr(start, at_ - start))};
  }

  Result<unsigned> hex4() {
    if (text_.size() - at_ < 4) return bad("a short \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[at_++];
      int digit = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
      if (digit < 0) return bad("a bad \\u escape");
      code = code * 16 + static_cast<unsigned>(digit);
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else if (code < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (code >> 18)));
      out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
    }
  }

  Result<std::string> string() {
    ++at_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_ >= text_.size()) return bad("an unterminated string");
      char c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return bad("a control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (at_ >= text_.size()) return bad("an unterminated escape");
      char e = text_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          auto code = hex4();
          if (!code) return std::unexpected(code.error());
          if (*code >= 0xd800 && *code < 0xdc00) {  // a surrogate pair
            if (text_.substr(at_, 2) != "\\u") return bad("a lone surrogate");
            at_ += 2;
            auto low = hex4();
            if (!low) return std::unexpected(low.error());
            if (*low < 0xdc00 || *low > 0xdfff) return bad("a bad surrogate pair");
            *code = 0x10000 + ((*code - 0xd800) << 10) + (*low - 0xdc00);
          } else if (*code >= 0xdc00 && *code <= 0xdfff) {
            return bad("a lone surrogate");
          }
          append_utf8(out, *code);
          break;
        }
        default:
          return bad("an unknown escape");
      }
    }
  }

  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace

const Value* Value::find(std::string_view name) const {
  if (kind != Kind::Object) return nullptr;
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    if (it->name == name) return &it->value;
  return nullptr;
}

Result<Value> parse(std::string_view text) { return Reader(text).document(); }

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[(c >> 4) & 0xf]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace json

namespace base64 {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int, 256> decoding_table() {
  std::array<int, 256> table{};
  for (auto& entry : table) entry = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i)
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int>(i);
  return table;
}

}  // namespace

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t group = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size())
      group |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kAlphabet[(group >> 18) & 63]);
    out.push_back(kAlphabet[(group >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(group >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kAlphabet[group & 63] : '=');
  }
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  static constexpr auto kTable = decoding_table();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    int pads = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    std::uint32_t group = 0;
    for (int j = 0; j < 4 - pads; ++j) {
      int v = kTable[static_cast<unsigned char>(text[i + static_cast<std::size_t>(j)])];
      if (v < 0) return std::nullopt;
      group |= static_cast<std::uint32_t>(v) << (18 - 6 * j);
    }
    out.push_back(static_cast<char>(group >> 16));
    if (pads < 2) out.push_back(static_cast<char>((group >> 8) & 0xff));
    if (pads < 1) out.push_back(static_cast<char>(group & 0xff));
    // Canonical only: the bits a padded group leaves out must be zero.
    if ((pads == 1 && (group & 0xff) != 0) || (pads == 2 && (group & 0xffff) != 0)) return std::nullopt;
  }
  return out;
}

}  // namespace base64
}  // namespace rdmakit::xfer::metadata
