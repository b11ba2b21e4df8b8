// Program binaries kept between processes: keys, files, loading and storing. See
// program_cache.hpp.
#include "program_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <set>
#include <vector>

#include "cl_info.hpp"
#include "launch_log.hpp"
#include "settings.hpp"
#include "tuning.hpp"

namespace oclf {

namespace {

constexpr const char* kMagic = "oclf-program-binary 1";
constexpr size_t kMaxIncludes = 256;           // files one program may include, nested ones too
constexpr int kMaxDepth = 16;                  // nesting of includes
constexpr size_t kMaxFileBytes = 256u << 20;   // a larger file is not read
constexpr size_t kMaxFiles = 2000;             // the folder is trimmed past these, oldest first,
constexpr uint64_t kMaxBytes = 512ull << 20;   // to three quarters of them
constexpr time_t kStaleTempSeconds = 3600;     // a temporary file this old was left by a crash

// The whole file at `path` into *text; false when it cannot be read.
bool read_text(const std::string& path, std::string* text) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  text->clear();
  char chunk[65536];
  ssize_t n = 0;
  while ((n = read(fd, chunk, sizeof(chunk))) > 0) text->append(chunk, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// The -I folders of a build option string ("-Idir" or "-I dir"), in order.
std::vector<std::string> include_folders(const std::string& options) {
  std::vector<std::string> words, folders;
  size_t at = 0;
  while (at < options.size()) {
    while (at < options.size() && std::isspace(static_cast<unsigned char>(options[at]))) ++at;
    size_t end = at;
    while (end < options.size() && !std::isspace(static_cast<unsigned char>(options[end]))) ++end;
    if (end > at) words.push_back(options.substr(at, end - at));
    at = end;
  }
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "-I" && i + 1 < words.size())
      folders.push_back(words[++i]);
    else if (words[i].size() > 2 && words[i].compare(0, 2, "-I") == 0)
      folders.push_back(words[i].substr(2));
  }
  return folders;
}

// What one preprocessor line includes: false when it is no include, true with *name set
// when it is `#include "name"` or `#include <name>`, true with *name empty when it is an
// include of another form (a macro, #include_next, #import), which the cache cannot follow.
bool include_of(const std::string& line, std::string* name) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return false;
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos) return false;
  name->clear();
  if (line.compare(i, 6, "import") == 0) return true;
  if (line.compare(i, 7, "include") != 0) return false;
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || (line[i] != '"' && line[i] != '<')) return true;
  const size_t end = line.find(line[i] == '"' ? '"' : '>', i + 1);
  if (end != std::string::npos && end > i + 1) *name = line.substr(i + 1, end - i - 1);
  return true;
}

// Appends to *key every file the #include lines of `source` (a file of folder `own`) can
// name, in every folder the compiler might look in (`own`, the working folder and the -I
// folders), with its whole text, and does the same for their includes. False when an
// include names no file anywhere, has a form the cache cannot follow, or nests too deep.
bool add_includes(const std::string& source, const std::string& own, const std::vector<std::string>& folders,
                  int depth, std::set<std::string>* seen, std::string* key) {
  std::string text = source;
  for (size_t splice = text.find("\\\n"); splice != std::string::npos; splice = text.find("\\\n", splice))
    text.erase(splice, 2);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string name;
    if (include_of(text.substr(start, end - start), &name)) {
      if (name.empty() || depth >= kMaxDepth) return false;
      std::vector<std::string> candidates;
      if (name.front() == '/') {
        candidates.push_back(name);
      } else {
        candidates.push_back(own + "/" + name);
        candidates.push_back("./" + name);
        for (const std::string& folder : folders) candidates.push_back(folder + "/" + name);
      }
      bool found = false;
      for (const std::string& path : candidates) {
        struct stat st {};
        if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        std::string included;
        if (!read_text(path, &included)) return false;
        found = true;
        *key += "\ninclude " + name + " (" + std::to_string(included.size()) + " bytes):\n" + included;
        if (!seen->insert(path).second) continue;  // its own includes are in the key already
        if (seen->size() > kMaxIncludes) return false;
        if (!add_includes(included, folder_of(path), folders, depth + 1, seen, key)) return false;
      }
      if (!found) return false;
    }
    start = end + 1;
  }
  return true;
}

// Whether `dir` is a folder that only this process's user can write, in a parent that others
// cannot write either (unless it is sticky, as /tmp): no one else can put a file there.
bool private_folder(const std::string& dir) {
  struct stat st {}, parent {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
  if (stat(folder_of(dir).c_str(), &parent) != 0) return false;
  const bool others_write = (parent.st_mode & (S_IWGRP | S_IWOTH)) != 0 && parent.st_uid != geteuid();
  return !others_write || (parent.st_mode & S_ISVTX) != 0;
}

// mkdir -p of `dir`, the last folder private (0700); then whether it is private_folder().
bool make_private_folder(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (mkdir(part.c_str(), i == dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) return false;
  }
  return private_folder(dir);
}

// Removes temporary files left by crashed writers, and the least recently used binaries
// while the folder holds more than kMaxFiles files or kMaxBytes bytes.
void trim(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  struct Entry {
    time_t used;
    uint64_t bytes;
    std::string path;
  };
  std::vector<Entry> binaries;
  uint64_t total = 0;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name, path = dir + "/" + name;
    struct stat st {};
    if (name[0] == '.' || lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.find(".tmp-") != std::string::npos) {
      if (now - st.st_mtime > kStaleTempSeconds) unlink(path.c_str());
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0) {
      binaries.push_back({st.st_mtime, static_cast<uint64_t>(st.st_size), path});
      total += static_cast<uint64_t>(st.st_size);
    }
  }
  closedir(d);
  if (binaries.size() <= kMaxFiles && total <= kMaxBytes) return;
  std::sort(binaries.begin(), binaries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  size_t files = binaries.size();
  for (const Entry& e : binaries) {
    if (files <= kMaxFiles * 3 / 4 && total <= kMaxBytes * 3 / 4) break;
    if (unlink(e.path.c_str()) == 0) --files, total -= e.bytes;
  }
}

}  // namespace

std::string ProgramCache::folder() {
  if (launch_log::active()) return "";
  const std::string value = setting("PROGRAM_CACHE");
  if (value == "0") return "";
  if (value.empty() || value == "1") {
    const std::string base = Tuning::cache_folder();
    return base.empty() ? "" : base + "/programs";
  }
  if (value.find('/') == std::string::npos)
    throw Error(setting_variable("PROGRAM_CACHE") + " must be 1, 0 or a folder's path (with a /), got " + value,
                CL_INVALID_VALUE);
  const size_t last = value.find_last_not_of('/');
  return last == std::string::npos ? "/" : value.substr(0, last + 1);
}

// Platform, device and driver, and a short name of the device for file names.
std::string ProgramCache::device_key() {
  if (!device_key_.empty()) return device_key_;
  cl_platform_id platform = nullptr;
  CL_CHECK(clGetDeviceInfo(device_, CL_DEVICE_PLATFORM, sizeof(platform), &platform, nullptr));
  const std::string name = device_string(device_, CL_DEVICE_NAME);
  device_key_ = "platform: " + platform_string(platform, CL_PLATFORM_NAME) + " " +
                platform_string(platform, CL_PLATFORM_VERSION) + "\ndevice: " + name + "\ndevice version: " +
                device_string(device_, CL_DEVICE_VERSION) + "\ndriver: " + device_string(device_, CL_DRIVER_VERSION);
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      device_slug_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!device_slug_.empty() && device_slug_.back() != '-')
      device_slug_ += '-';
  }
  while (!device_slug_.empty() && device_slug_.back() == '-') device_slug_.pop_back();
  device_slug_ = device_slug_.substr(0, 40);
  return device_key_;
}

std::string ProgramCache::key(const std::string& path, const std::string& source, const std::string& options) {
  std::string key = std::string(kMagic) + "\n" + device_key() + "\noptions: " + options + "\nsource (" +
                    std::to_string(source.size()) + " bytes):\n" + source;
  std::set<std::string> seen;
  if (!add_includes(source, folder_of(path), include_folders(options), 0, &seen, &key)) return "";
  return key;
}

std::string ProgramCache::file_of(const std::string& dir, const std::string& key) {
  device_key();  // makes device_slug_
  return dir + "/" + (device_slug_.empty() ? "device" : device_slug_) + "-" + Tuning::hash(key) + ".bin";
}

// A file is the line "<kMagic> <key bytes> <binary bytes> <checksum>\n", the key, the binary;
// the checksum is Tuning::hash of the key and the binary together.
cl_program ProgramCache::load(const std::string& key, const std::string& options) {
  const std::string dir = folder();
  if (dir.empty() || key.empty() || !private_folder(dir)) return nullptr;
  const std::string path = file_of(dir, key);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  std::string text;
  bool usable = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && static_cast<size_t>(st.st_size) <= kMaxFileBytes;
  if (usable) {
    char chunk[65536];
    ssize_t n = 0;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) text.append(chunk, static_cast<size_t>(n));
    usable = n == 0;
  }
  if (usable) futimens(fd, nullptr);  // recently used: trimmed last
  close(fd);

  const std::string magic = std::string(kMagic) + " ";
  const size_t eol = text.find('\n');
  usable = usable && eol != std::string::npos && text.compare(0, magic.size(), magic) == 0;
  size_t key_bytes = 0, binary_bytes = 0;
  std::string checksum;
  if (usable) {
    const std::string header = text.substr(magic.size(), eol - magic.size());
    char* end = nullptr;
    key_bytes = std::strtoull(header.c_str(), &end, 10);
    binary_bytes = std::strtoull(end, &end, 10);
    checksum = *end == ' ' ? std::string(end + 1) : "";
    usable = key_bytes == key.size() && binary_bytes > 0 && text.size() - eol - 1 == key_bytes + binary_bytes &&
             text.compare(eol + 1, key_bytes, key) == 0 && checksum == Tuning::hash(text.substr(eol + 1));
  }
  if (!usable) {
    ++rejected_;
    return nullptr;
  }
  const unsigned char* binary = reinterpret_cast<const unsigned char*>(text.data() + eol + 1 + key_bytes);
  cl_int binary_status = CL_SUCCESS, status = CL_SUCCESS;
  cl_program program =
      clCreateProgramWithBinary(context_, 1, &device_, &binary_bytes, &binary, &binary_status, &status);
  if (status == CL_SUCCESS && binary_status == CL_SUCCESS)
    status = clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr);
  else if (status == CL_SUCCESS)
    status = binary_status;
  if (status != CL_SUCCESS) {
    if (program) clReleaseProgram(program);
    ++rejected_;
    return nullptr;
  }
  ++loaded_;
  return program;
}

void ProgramCache::store(const std::string& key, cl_program program) {
  const std::string dir = folder();
  if (dir.empty() || key.empty() || !make_private_folder(dir)) return;
  size_t bytes = 0;
  cl_uint devices = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof(devices), &devices, nullptr) != CL_SUCCESS ||
      devices != 1 ||
      clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(bytes), &bytes, nullptr) != CL_SUCCESS || bytes == 0)
    return;
  std::string body = key + std::string(bytes, '\0');
  unsigned char* binary = reinterpret_cast<unsigned char*>(&body[key.size()]);
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(binary), &binary, nullptr) != CL_SUCCESS) return;
  const std::string header = std::string(kMagic) + " " + std::to_string(key.size()) + " " + std::to_string(bytes) +
                             " " + Tuning::hash(body) + "\n";

  const std::string path = file_of(dir, key);
  static std::atomic<int> written{0};  // with the pid, a name no other writer uses
  const std::string temp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(written++);
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, body.data(), body.size());
  if (close(fd) != 0 || !ok || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return;
  }
  ++stored_;
  if (!trimmed_) {
    trimmed_ = true;
    trim(dir);
  }
}

}  // namespace oclf
