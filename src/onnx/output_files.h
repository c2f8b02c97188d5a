// Crash-safe output of one model file and its optional external-data file.
//
// The commit point is a single rename: the model is written under a unique
// temporary name; its weights (if external) go to a data file under a name no
// committed model references (first free of <f>.data, <f>.1.data, ...). Both
// are fsync'ed, then rename(temp, <f>) switches from the old model (with its
// old data, untouched so far) to the new one (with its new data) at once. Old
// data files of <f> are removed only after the commit, and only names this
// scheme creates. At every instant <f> is the old complete pair or the new.
//
// Concurrency: files being written are flock'ed; creation, commit and cleanup
// of one directory run under a flock of the directory, so a writer never loses
// a file it is still using to another writer's cleanup. Temporary files of
// killed runs (unlocked, named .pt2onnx-<hash of the file name>-*.tmp) are
// removed by the next export to the same path. A symlink at <f> is written
// through: the link is kept and the file it points to is replaced.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pt2onnx {

class OutputFiles {
 public:
  // Resolves `path` (symlinks followed), removes stale temporaries of it and
  // creates the temporary model file. Throws pt2onnx::Error naming the path.
  explicit OutputFiles(const std::string& path);
  ~OutputFiles();  // not committed: removes what it created
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  int model_fd() const { return model_fd_; }
  const std::string& model_temp_path() const { return model_tmp_; }
  // Creates a fresh external-data file (one per call: shards); returns its
  // index. Names: <f>.data, else the first free of <f>.1.data, <f>.2.data...
  size_t create_data();
  size_t data_files() const { return data_.size(); }
  int data_fd(size_t i = 0) const { return data_[i].fd; }
  // A data file's name as the model's `location` (beside the model) and its
  // full path.
  const std::string& data_location(size_t i = 0) const { return data_[i].name; }
  std::string data_path(size_t i = 0) const;
  // The file written (symlinks resolved).
  const std::string& target() const { return target_; }

  // fsync both files, rename the model into place, fsync the directory,
  // then remove data files of earlier models of this path.
  void commit();

 private:
  void cleanup_locked(bool after_commit);

  std::string target_;  // resolved path of the model
  std::string dir_;     // its directory ("." if none)
  std::string base_;    // its file name
  std::string tag_;     // ".pt2onnx-<hash of base_>-": prefix of our temporaries
  std::string model_tmp_;
  struct DataFile {
    std::string name;
    int fd = -1;
  };
  std::vector<DataFile> data_;
  bool is_ours(const std::string& data_name) const;
  int dir_fd_ = -1;
  int model_fd_ = -1;
  bool committed_ = false;
};

}  // namespace pt2onnx
