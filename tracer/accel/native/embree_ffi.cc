// Intel Embree as XLA custom calls (the XLA FFI): the jitted program sends a wavefront's rays to
// Embree in one call, in XLA's own buffers, with no Python and no GIL on the way.
//
// The program names a scene by an int32 handle (a traced scalar), so one compiled program serves
// every frame of a job; the host builds and frees scenes through the plain C functions below
// (tracer/accel/embree.py calls them with ctypes). Embree itself is not linked: its functions are
// looked up in the library the embreex wheel ships (jf_embree_open), so building this needs only
// Embree's headers (vendored under embree4/) and XLA's FFI headers (from jaxlib).
//
// A scene may hold instances of shape groups (Embree's own instancing, one level): each group's
// triangles are a scene of their own, placed by each of its instances' affine transforms; a hit
// in an instance names it, and its triangle by the group's offset in the program's tables.
//
// A ray's answer must not depend on the rays beside it in its batch, or renders would change with
// the batch, the pool and the device count. Closest hits go to Embree in packets of the rays that
// ask (rtcIntersect16 on an AVX-512 device, rtcIntersect8 below it), which gives each ray the bits
// rtcIntersect1 gives it: hit distance and triangle, measured on 12 million rays aimed at edges and
// corners, shuffled and masked into other packets, world and instanced, robust or not, AVX2 and
// AVX-512. Embree's packet occlusion test does not: a ray through an edge was occluded or not by
// which rays shared its packet (its traversal goes on ray by ray once few in a packet are left,
// with other arithmetic), so occlusion asks one ray at a time (rtcOccluded1). Embree's arithmetic
// differs between its ISA paths (hit distances, not ids), so a device is made per ISA
// ("isa=avx2"), the job's level.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "embree4/rtcore.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// ---------------------------------------------------------------------------------------------
// Embree's functions, from the shared library named to jf_embree_open.

struct Embree {
  decltype(&rtcNewDevice) NewDevice;
  decltype(&rtcGetDeviceError) GetDeviceError;
  decltype(&rtcGetDeviceLastErrorMessage) GetDeviceLastErrorMessage;
  decltype(&rtcNewScene) NewScene;
  decltype(&rtcSetSceneFlags) SetSceneFlags;
  decltype(&rtcCommitScene) CommitScene;
  decltype(&rtcReleaseScene) ReleaseScene;
  decltype(&rtcNewGeometry) NewGeometry;
  decltype(&rtcSetNewGeometryBuffer) SetNewGeometryBuffer;
  decltype(&rtcCommitGeometry) CommitGeometry;
  decltype(&rtcAttachGeometryByID) AttachGeometryByID;
  decltype(&rtcSetGeometryInstancedScene) SetGeometryInstancedScene;
  decltype(&rtcSetGeometryTransform) SetGeometryTransform;
  decltype(&rtcReleaseGeometry) ReleaseGeometry;
  decltype(&rtcIntersect8) Intersect8;
  decltype(&rtcIntersect16) Intersect16;
  decltype(&rtcOccluded1) Occluded1;
};

Embree api;
std::mutex open_lock;
bool opened = false;

template <typename F>
bool Find(void* library, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(library, name));
  if (!out) missing = name;
  return out != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Scenes by handle. A query holds its scene's entry while it runs, so closing a scene during a
// query frees it only after the query.

struct Entry {
  RTCScene scene = nullptr;
  int packet = 8;  // rays a query: 16 on an AVX-512 device, else 8
  // Of each instance (its geometry id - 1): the id, in the program's triangle tables, of its
  // group's first triangle.
  std::vector<int32_t> instance_first_prim;
  ~Entry() {
    if (scene) api.ReleaseScene(scene);
  }
};

std::mutex scenes_lock;
// Never destroyed: at exit, entries still open must not release their scenes from static
// destructors while Embree's own threads are being torn down (that aborts the process).
auto& scenes = *new std::unordered_map<int32_t, std::shared_ptr<const Entry>>;
int32_t next_handle = 1;
std::map<std::string, RTCDevice> devices;  // one per ISA config, kept for the process

std::shared_ptr<const Entry> Acquire(int32_t handle) {
  std::lock_guard<std::mutex> hold(scenes_lock);
  auto it = scenes.find(handle);
  return it == scenes.end() ? nullptr : it->second;
}

void Message(char* out, size_t size, const std::string& text) {
  if (out && size) std::snprintf(out, size, "%s", text.c_str());
}

std::string DeviceError(RTCDevice device, const char* what) {
  const char* message = device ? api.GetDeviceLastErrorMessage(device) : nullptr;
  return std::string(what) + (message && *message ? std::string(": ") + message : std::string());
}

// ---------------------------------------------------------------------------------------------
// Splitting a batch over XLA's intra-op threads. The calling thread takes chunks too, and waits
// only for chunks already taken, so it never waits on a task that has not started (the caller
// may itself be one of the pool's threads). The state is shared: a task that starts after the
// call returned finds no chunk left and leaves.

constexpr int64_t kChunk = 512;

struct Split {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int64_t chunks = 0;
};

template <typename Body>
void RunChunks(Split& split, int64_t n, const Body& body) {
  for (int64_t c; (c = split.next.fetch_add(1)) < split.chunks;) {
    int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    body(begin, end);
    split.done.fetch_add(1, std::memory_order_release);
  }
}

template <typename Body>
void ParallelFor(ffi::ThreadPool& pool, int64_t n, Body body) {
  auto split = std::make_shared<Split>();
  split->chunks = (n + kChunk - 1) / kChunk;
  int64_t helpers = std::min<int64_t>(pool.num_threads(), split->chunks - 1);
  // body is copied into each task: it holds pointers into XLA's buffers, valid until the last
  // taken chunk is done, which the caller waits for.
  for (int64_t i = 0; i < helpers; ++i)
    pool.Schedule([split, n, body] { RunChunks(*split, n, body); });
  RunChunks(*split, n, body);
  while (split->done.load(std::memory_order_acquire) < split->chunks) std::this_thread::yield();
}

// ---------------------------------------------------------------------------------------------
// The queries. Rays arrive as (3, N) columns: component k of ray i at [k * N + i]. A ray with
// t_max <= 0 (or NaN) asks nothing: no hit, not occluded.

void SetRay(RTCRay& ray, const float* o, const float* d, int64_t n, int64_t i, float t_max) {
  ray.org_x = o[i], ray.org_y = o[n + i], ray.org_z = o[2 * n + i];
  ray.dir_x = d[i], ray.dir_y = d[n + i], ray.dir_z = d[2 * n + i];
  ray.tnear = 0.0f, ray.tfar = t_max, ray.time = 0.0f;
  ray.mask = 0xFFFFFFFFu, ray.id = 0, ray.flags = 0;
}

// Room after the hit records for any instance fields a build of Embree adds (their layout depends
// on RTC_MAX_INSTANCE_LEVEL_COUNT): Embree may write them, we never read them.
template <typename RayHitK, int K>
struct alignas(64) PaddedRayHits {
  RayHitK rayhit;
  unsigned int spare[16 * K];
};

// The closest hits of rays [begin, end) into t, prim and (where `instance` is not null) the
// instance hit, -1 for a world triangle; prim is the triangle's id in the program's tables. A ray
// with t_max <= 0 (or NaN) asks nothing: no hit. The rays that ask fill the packets, K at a time.
template <int K, typename RayHitK>
void ClosestPackets(const Entry& entry, int64_t n, const float* o, const float* d, const float* t_max,
                    int64_t begin, int64_t end, float* t_out, int32_t* prim_out, int32_t* instance) {
  PaddedRayHits<RayHitK, K> q;
  alignas(64) int valid[K];
  int64_t lane_ray[K];
  auto& ray = q.rayhit.ray;
  auto& hit = q.rayhit.hit;
  for (int64_t i = begin; i < end; ++i) {
    t_out[i] = std::numeric_limits<float>::infinity(), prim_out[i] = -1;
    if (instance) instance[i] = -1;
  }
  for (int64_t next = begin; next < end;) {
    int lanes = 0;
    for (; next < end && lanes < K; ++next) {
      int64_t i = next;
      if (!(t_max[i] > 0.0f)) continue;
      int j = lanes++;
      lane_ray[j] = i;
      ray.org_x[j] = o[i], ray.org_y[j] = o[n + i], ray.org_z[j] = o[2 * n + i];
      ray.dir_x[j] = d[i], ray.dir_y[j] = d[n + i], ray.dir_z[j] = d[2 * n + i];
      ray.tnear[j] = 0.0f, ray.tfar[j] = t_max[i], ray.time[j] = 0.0f;
      ray.mask[j] = 0xFFFFFFFFu, ray.id[j] = 0, ray.flags[j] = 0;
      hit.geomID[j] = RTC_INVALID_GEOMETRY_ID, hit.primID[j] = RTC_INVALID_GEOMETRY_ID;
      hit.instID[0][j] = RTC_INVALID_GEOMETRY_ID;  // (just after geomID whatever the build's levels)
    }
    if (lanes == 0) break;
    for (int j = 0; j < K; ++j) valid[j] = j < lanes ? -1 : 0;
    if constexpr (K == 16)
      api.Intersect16(valid, entry.scene, &q.rayhit, nullptr);
    else
      api.Intersect8(valid, entry.scene, &q.rayhit, nullptr);
    for (int j = 0; j < lanes; ++j) {
      if (hit.geomID[j] == RTC_INVALID_GEOMETRY_ID) continue;
      int64_t i = lane_ray[j];
      int32_t prim = static_cast<int32_t>(hit.primID[j]);
      unsigned placed = hit.instID[0][j];
      if (placed != RTC_INVALID_GEOMETRY_ID) {
        if (!instance || placed == 0 || placed > entry.instance_first_prim.size()) continue;  // (never built so)
        instance[i] = static_cast<int32_t>(placed - 1);
        prim += entry.instance_first_prim[placed - 1];
      }
      t_out[i] = ray.tfar[j], prim_out[i] = prim;
    }
  }
}

// `query(entry, n, o, d, t_max)` over the scene the program names by `handle`, held meanwhile.
template <typename Query>
ffi::Error OnScene(ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> o, ffi::Buffer<ffi::F32> d,
                   ffi::Buffer<ffi::F32> t_max, Query query) {
  int32_t id = handle.typed_data()[0];
  std::shared_ptr<const Entry> entry = Acquire(id);
  if (!entry)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "intersection scene " + std::to_string(id) +
                                                            " is gone: the scene that built it was closed or freed");
  query(*entry, static_cast<int64_t>(t_max.element_count()), o.typed_data(), d.typed_data(), t_max.typed_data());
  return ffi::Error::Success();
}

// Every ray's closest hit over the scene `handle` names, split over XLA's threads.
ffi::Error ClosestHits(ffi::ThreadPool& pool, ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> o,
                       ffi::Buffer<ffi::F32> d, ffi::Buffer<ffi::F32> t_max, float* t_out, int32_t* prim_out,
                       int32_t* instance_out) {
  return OnScene(handle, o, d, t_max, [&](const Entry& entry, int64_t n, const float* op, const float* dp,
                                          const float* tp) {
    ParallelFor(pool, n, [=, &entry](int64_t begin, int64_t end) {
      if (entry.packet == 16)
        ClosestPackets<16, RTCRayHit16>(entry, n, op, dp, tp, begin, end, t_out, prim_out, instance_out);
      else
        ClosestPackets<8, RTCRayHit8>(entry, n, op, dp, tp, begin, end, t_out, prim_out, instance_out);
    });
  });
}

ffi::Error Closest(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> o,
                   ffi::Buffer<ffi::F32> d, ffi::Buffer<ffi::F32> t_max, ffi::ResultBuffer<ffi::F32> t,
                   ffi::ResultBuffer<ffi::S32> prim) {
  return ClosestHits(pool, handle, o, d, t_max, t->typed_data(), prim->typed_data(), nullptr);
}

ffi::Error ClosestInstanced(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> o,
                            ffi::Buffer<ffi::F32> d, ffi::Buffer<ffi::F32> t_max, ffi::ResultBuffer<ffi::F32> t,
                            ffi::ResultBuffer<ffi::S32> prim, ffi::ResultBuffer<ffi::S32> instance) {
  return ClosestHits(pool, handle, o, d, t_max, t->typed_data(), prim->typed_data(), instance->typed_data());
}

// Occlusion one ray at a time (see the top of the file). A ray with t_max <= 0 (or NaN) is not occluded.
ffi::Error Occluded(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> handle, ffi::Buffer<ffi::F32> o,
                    ffi::Buffer<ffi::F32> d, ffi::Buffer<ffi::F32> t_max,
                    ffi::ResultBuffer<ffi::PRED> blocked) {
  bool* out = blocked->typed_data();
  return OnScene(handle, o, d, t_max, [&](const Entry& entry, int64_t n, const float* op, const float* dp,
                                          const float* tp) {
    RTCScene scene = entry.scene;
    ParallelFor(pool, n, [=](int64_t begin, int64_t end) {
      PaddedRayHits<RTCRayHit, 1> q;
      for (int64_t i = begin; i < end; ++i) {
        out[i] = false;
        if (!(tp[i] > 0.0f)) continue;
        SetRay(q.rayhit.ray, op, dp, n, i, tp[i]);
        api.Occluded1(scene, &q.rayhit.ray, nullptr);
        // Embree marks an occluded ray by setting tfar to -inf.
        out[i] = q.rayhit.ray.tfar < 0.0f;
      }
    });
  });
}

}  // namespace

// Every query's arguments: XLA's thread pool, the scene handle, o, d (3, N) and t_max (N,).
static auto RayQuery() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::S32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(JfEmbreeClosest, Closest,
                              RayQuery().Ret<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JfEmbreeClosestInstanced, ClosestInstanced,
                              RayQuery()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JfEmbreeOccluded, Occluded, RayQuery().Ret<ffi::Buffer<ffi::PRED>>());

// ---------------------------------------------------------------------------------------------
// The host's side (ctypes). Each returns 0 (or a handle > 0) and writes a one-line reason into
// `error` on failure.

extern "C" __attribute__((visibility("default"))) int jf_embree_open(const char* library, char* error,
                                                                    size_t error_size) {
  std::lock_guard<std::mutex> hold(open_lock);
  if (opened) return 0;
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* reason = dlerror();
    Message(error, error_size, std::string("cannot load Embree: ") + (reason ? reason : library));
    return -1;
  }
  std::string missing;
  bool ok = Find(lib, "rtcNewDevice", api.NewDevice, missing) &&
            Find(lib, "rtcGetDeviceError", api.GetDeviceError, missing) &&
            Find(lib, "rtcGetDeviceLastErrorMessage", api.GetDeviceLastErrorMessage, missing) &&
            Find(lib, "rtcNewScene", api.NewScene, missing) &&
            Find(lib, "rtcSetSceneFlags", api.SetSceneFlags, missing) &&
            Find(lib, "rtcCommitScene", api.CommitScene, missing) &&
            Find(lib, "rtcReleaseScene", api.ReleaseScene, missing) &&
            Find(lib, "rtcNewGeometry", api.NewGeometry, missing) &&
            Find(lib, "rtcSetNewGeometryBuffer", api.SetNewGeometryBuffer, missing) &&
            Find(lib, "rtcCommitGeometry", api.CommitGeometry, missing) &&
            Find(lib, "rtcAttachGeometryByID", api.AttachGeometryByID, missing) &&
            Find(lib, "rtcSetGeometryInstancedScene", api.SetGeometryInstancedScene, missing) &&
            Find(lib, "rtcSetGeometryTransform", api.SetGeometryTransform, missing) &&
            Find(lib, "rtcReleaseGeometry", api.ReleaseGeometry, missing) &&
            Find(lib, "rtcIntersect8", api.Intersect8, missing) &&
            Find(lib, "rtcIntersect16", api.Intersect16, missing) &&
            Find(lib, "rtcOccluded1", api.Occluded1, missing);
  if (!ok) {
    Message(error, error_size, std::string("the Embree library lacks ") + missing + ": it is not Embree 4");
    dlclose(lib);
    return -1;
  }
  opened = true;
  return 0;
}

namespace {

// A triangle mesh of `count` triangles (corners at vertices[9 t + 3 c + k]: triangle t, corner
// c, coordinate k), committed, or null.
RTCGeometry NewMesh(RTCDevice device, const float* vertices, int64_t count) {
  RTCGeometry mesh = api.NewGeometry(device, RTC_GEOMETRY_TYPE_TRIANGLE);
  auto* v = static_cast<float*>(api.SetNewGeometryBuffer(mesh, RTC_BUFFER_TYPE_VERTEX, 0, RTC_FORMAT_FLOAT3,
                                                         3 * sizeof(float), static_cast<size_t>(3 * count)));
  auto* index = static_cast<unsigned*>(api.SetNewGeometryBuffer(mesh, RTC_BUFFER_TYPE_INDEX, 0, RTC_FORMAT_UINT3,
                                                                3 * sizeof(unsigned), static_cast<size_t>(count)));
  if (!v || !index) {
    api.ReleaseGeometry(mesh);
    return nullptr;
  }
  std::memcpy(v, vertices, sizeof(float) * 9 * static_cast<size_t>(count));
  for (int64_t i = 0; i < 3 * count; ++i) index[i] = static_cast<unsigned>(i);
  api.CommitGeometry(mesh);
  return mesh;
}

// A committed scene of one mesh (none where count is 0), or null.
RTCScene NewMeshScene(RTCDevice device, const float* vertices, int64_t count, int robust) {
  RTCScene scene = api.NewScene(device);
  api.SetSceneFlags(scene, robust ? RTC_SCENE_FLAG_ROBUST : RTC_SCENE_FLAG_NONE);
  if (count > 0) {
    RTCGeometry mesh = NewMesh(device, vertices, count);
    if (!mesh) {
      api.ReleaseScene(scene);
      return nullptr;
    }
    api.AttachGeometryByID(scene, mesh, 0);
    api.ReleaseGeometry(mesh);
  }
  api.CommitScene(scene);
  return scene;
}

}  // namespace

// A scene of `count` world triangles (corners at vertices[9 t + 3 c + k]: triangle t, corner c,
// coordinate k) and `n_instances` instances of `n_groups` shape groups: group g has
// group_counts[g] triangles (their corners one group after another in group_vertices, in object
// space), the first of them at id group_first_prim[g] of the program's triangle tables; instance
// i places group instance_group[i] by the affine map instance_xfm[12 i ...] (3x4, column-major).
// On the device of `config` (e.g. "isa=avx2"); robust: the watertight test.
extern "C" __attribute__((visibility("default"))) int32_t jf_embree_new_scene(
    const float* vertices, int64_t count, int64_t n_groups, const float* group_vertices, const int64_t* group_counts,
    const int32_t* group_first_prim, int64_t n_instances, const int32_t* instance_group, const float* instance_xfm,
    int robust, const char* config, char* error, size_t error_size) {
  if (!opened) {
    Message(error, error_size, "Embree is not loaded");
    return 0;
  }
  RTCDevice device;
  {
    std::lock_guard<std::mutex> hold(scenes_lock);
    auto it = devices.find(config);
    if (it == devices.end()) {
      device = api.NewDevice(config);
      if (!device) {
        Message(error, error_size, std::string("Embree refused the device '") + config + "'");
        return 0;
      }
      devices.emplace(config, device);
    } else {
      device = it->second;
    }
  }
  auto entry = std::make_shared<Entry>();
  entry->packet = std::strstr(config, "avx512") ? 16 : 8;  // the device's native packet
  std::vector<RTCScene> groups;
  auto fail = [&](const char* what) {
    Message(error, error_size, DeviceError(device, what));
    for (RTCScene g : groups)
      if (g) api.ReleaseScene(g);
    return 0;
  };
  for (int64_t g = 0, offset = 0; g < n_groups; offset += group_counts[g], ++g) {
    groups.push_back(NewMeshScene(device, group_vertices + 9 * offset, group_counts[g], robust));
    if (!groups.back()) return fail("Embree could not allocate a shape group's triangles");
  }
  RTCScene scene = api.NewScene(device);
  entry->scene = scene;  // released with the entry
  api.SetSceneFlags(scene, robust ? RTC_SCENE_FLAG_ROBUST : RTC_SCENE_FLAG_NONE);
  if (count > 0) {
    RTCGeometry mesh = NewMesh(device, vertices, count);
    if (!mesh) return fail("Embree could not allocate the triangles");
    api.AttachGeometryByID(scene, mesh, 0);
    api.ReleaseGeometry(mesh);
  }
  for (int64_t i = 0; i < n_instances; ++i) {
    int32_t g = instance_group[i];
    if (g < 0 || g >= n_groups) return fail("an instance names no shape group");
    RTCGeometry placed = api.NewGeometry(device, RTC_GEOMETRY_TYPE_INSTANCE);
    api.SetGeometryInstancedScene(placed, groups[g]);
    api.SetGeometryTransform(placed, 0, RTC_FORMAT_FLOAT3X4_COLUMN_MAJOR, instance_xfm + 12 * i);
    api.CommitGeometry(placed);
    api.AttachGeometryByID(scene, placed, static_cast<unsigned>(i + 1));
    api.ReleaseGeometry(placed);
    entry->instance_first_prim.push_back(group_first_prim[g]);
  }
  api.CommitScene(scene);
  for (RTCScene g : groups) api.ReleaseScene(g);  // the instances hold them
  groups.clear();
  if (api.GetDeviceError(device) != RTC_ERROR_NONE) return fail("Embree could not build the scene");
  std::lock_guard<std::mutex> hold(scenes_lock);
  int32_t handle = next_handle++;
  scenes.emplace(handle, std::move(entry));
  return handle;
}

extern "C" __attribute__((visibility("default"))) void jf_embree_release_scene(int32_t handle) {
  std::lock_guard<std::mutex> hold(scenes_lock);
  scenes.erase(handle);  // the scene goes with the last query holding it
}

extern "C" __attribute__((visibility("default"))) int jf_embree_scene_is_open(int32_t handle) {
  std::lock_guard<std::mutex> hold(scenes_lock);
  return scenes.count(handle) ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// An (empty) Python module as well, so that importing it, as a walk over the package's modules
// does, works: its functions are reached through ctypes (tracer/accel/embree.py), not Python.

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_embree_ffi",
                             "Embree called from XLA: used through tracer.accel.embree (ctypes).", 0};

PyMODINIT_FUNC PyInit__embree_ffi() { return PyModule_Create(&module); }
