package llamaref

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The llama.cpp source that node-llama-cpp ships as a git bundle holds real data that tests
// use: models' vocabularies with their test vectors (models/ggml-vocab-*.gguf, .inp, .out)
// and real chat templates (models/templates/*.jinja). SourceFile reads one file of it.
//
// The bundle is cloned once, bare, into .cache/llama.cpp-bundle.git of the checkout; the
// clone goes to a temporary directory first and is renamed into place, so test binaries of
// several packages running at once never see a half-made clone.

var sourceMu sync.Mutex

// BundlePath returns the path of node-llama-cpp's gitRelease.bundle, or an error wrapping
// ErrNotInstalled.
func BundlePath() (string, error) {
	dir, _, err := locate()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("llamaref: no llama.cpp source bundle: %v: %w", err, ErrNotInstalled)
	}
	return p, nil
}

// sourceRepo returns a bare git repository holding the bundle's commits.
func sourceRepo() (string, error) {
	sourceMu.Lock()
	defer sourceMu.Unlock()
	bundle, err := BundlePath()
	if err != nil {
		return "", err
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	repo := filepath.Join(root, ".cache", "llama.cpp-bundle.git")
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); err == nil {
		return repo, nil
	}
	if err := os.MkdirAll(filepath.Dir(repo), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(repo), "llama.cpp-bundle.tmp*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	dst := filepath.Join(tmp, "repo.git")
	out, err := exec.Command("git", "clone", "--quiet", "--bare", bundle, dst).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("llamaref: cloning the llama.cpp bundle: %v: %s", err, out)
	}
	if err := os.Rename(dst, repo); err != nil {
		if _, statErr := os.Stat(filepath.Join(repo, "HEAD")); statErr == nil {
			return repo, nil // another process won the race
		}
		return "", err
	}
	return repo, nil
}

// SourceFile returns the contents of path (relative to the llama.cpp source root, for
// example "models/templates/Qwen3-Coder.jinja") at the bundle's HEAD commit.
func SourceFile(path string) ([]byte, error) {
	repo, err := sourceRepo()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command("git", "--git-dir", repo, "show", "HEAD:"+path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("llamaref: %s in the llama.cpp source: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// SourceFiles lists the files under dir (relative to the llama.cpp source root) at the
// bundle's HEAD commit, as paths relative to the root.
func SourceFiles(dir string) ([]string, error) {
	repo, err := sourceRepo()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("git", "--git-dir", repo, "ls-tree", "-r", "--name-only", "HEAD", "--", strings.TrimSuffix(dir, "/")+"/").Output()
	if err != nil {
		return nil, fmt.Errorf("llamaref: listing %s in the llama.cpp source: %v", dir, err)
	}
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			files = append(files, l)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("llamaref: no files under " + dir + " in the llama.cpp source")
	}
	return files, nil
}
