package vocab

import (
	"fmt"
	"strings"
)

// The generated part of the corpus: text written here and expanded from a
// fixed seed so that the vocabulary sees dialogue, numbers, dates, code-like
// identifiers, CJK and emoji, which the Go-derived text lacks. Changing a
// word list or the seed changes every trained vocabulary.

var (
	genNames = []string{"Ada", "Bruno", "Chen", "Dara", "Elif", "Farid", "Grace", "Hana", "Ivan", "Jonas",
		"Kiri", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tomas", "Uma", "Vera", "Wei", "Yusuf", "Zara"}
	genNouns = []string{"river", "garden", "engine", "letter", "window", "market", "mountain", "server", "kitchen",
		"library", "bridge", "harbor", "forest", "signal", "village", "machine", "lantern", "question", "answer",
		"story", "morning", "evening", "winter", "summer", "record", "model", "token", "cache", "request", "teacher",
		"student", "doctor", "farmer", "painter", "city", "island", "road", "clock", "door", "table", "book", "song",
		"storm", "ship", "train", "field", "stone", "bird", "horse", "house", "paper", "water", "light", "sound"}
	genVerbs = []string{"opened", "closed", "found", "carried", "watched", "wrote", "read", "built", "followed",
		"remembered", "forgot", "measured", "painted", "answered", "asked", "crossed", "repaired", "counted",
		"described", "explained", "noticed", "visited", "left", "reached", "shared", "kept", "lost", "moved"}
	genAdjs = []string{"old", "quiet", "bright", "narrow", "heavy", "gentle", "distant", "careful", "broken",
		"golden", "simple", "strange", "small", "large", "warm", "cold", "early", "late", "green", "blue",
		"patient", "curious", "silent", "busy", "empty", "full", "ancient", "modern", "tired", "happy"}
	genAdvs   = []string{"slowly", "quickly", "carefully", "quietly", "suddenly", "always", "never", "often", "again", "together"}
	genPreps  = []string{"near", "behind", "across", "under", "beside", "through", "along", "beyond", "inside", "over"}
	genLinks  = []string{"and then", "but", "because", "while", "so", "although", "after that", "before", "until", "since"}
	genMonths = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September",
		"October", "November", "December"}
	genQuestions = []string{"What is the capital of %s?", "How do I reverse a list in Go?", "Can you explain how a %s works?",
		"Why is the %s %s?", "Write a short poem about the %s.", "What time does the %s open?",
		"How many %ss are there in the %s?", "Summarize the story of the %s in one sentence.",
		"Translate \"the %s is %s\" into French.", "Is it true that the %s %s the %s?"}
	genCJK = []string{
		"今天天气很好，我们去公园散步吧。", "这个模型的词表是用我们自己的语料训练的。", "请问火车站怎么走？",
		"我喜欢读书，也喜欢写字。", "他们在河边的小房子里住了很多年。", "学习编程需要耐心和练习。",
		"東京は日本の首都です。", "今日はとても暑いですね。", "この本はとても面白かったです。", "ありがとうございます。",
		"私は毎朝コーヒーを飲みます。", "サーバーが応答しません。", "한국어도 조금 있습니다.", "안녕하세요, 만나서 반갑습니다.",
		"数据缓存可以减少重复计算。", "春天来了，花都开了。",
	}
	genEmoji = []string{"😀", "😂", "🙂", "😉", "😍", "🤔", "👍", "👋", "🎉", "🔥", "✨", "🚀", "🌍", "🌧", "☕", "🍕", "❤️", "✅", "❌", "⚠️", "📦", "🐍", "🦀", "🐹"}
	genOther = []string{"Ça va très bien, merci.", "Où est la bibliothèque ?", "Grüße aus München, schön dich zu sehen.",
		"¿Dónde está la estación?", "Привет, как дела?", "Спасибо за помощь.", "Καλημέρα σε όλους.", "naïve café résumé déjà vu",
		"Straße, Größe, Mädchen, Übung", "São Paulo é uma cidade grande."}
	genIdents = []string{"userID", "maxTokens", "blockSize", "kv_cache", "prefix_hash", "num_layers", "headDim",
		"tokenizer", "http.StatusOK", "context.Background()", "json.Marshal", "fmt.Sprintf", "os.ReadFile",
		"self.weight", "np.zeros", "torch.tensor", "std::vector<int>", "Vec<u8>", "HashMap<String, usize>"}
)

// generatedCorpus returns the generated text; about 120 KB.
func generatedCorpus() string {
	r := splitmix(0x5eed_c0_ffee)
	pick := func(list []string) string { return list[r.intn(len(list))] }
	var b strings.Builder
	sentence := func() string {
		s := fmt.Sprintf("The %s %s %s %s the %s %s the %s", pick(genAdjs), pick(genNouns), pick(genAdvs),
			pick(genVerbs), pick(genNouns), pick(genPreps), pick(genNouns))
		switch r.intn(4) {
		case 0:
			s += fmt.Sprintf(", %s %s %s a %s %s", pick(genLinks), pick(genNames), pick(genVerbs), pick(genAdjs), pick(genNouns))
		case 1:
			s = fmt.Sprintf("%s %s the %s %s", pick(genNames), pick(genVerbs), pick(genAdjs), pick(genNouns)) +
				fmt.Sprintf(" on %d %s %d", 1+r.intn(28), pick(genMonths), 1850+r.intn(180))
		case 2:
			s = fmt.Sprintf("\"It's %s,\" said %s. \"We'll %s the %s %s.\"", pick(genAdjs), pick(genNames),
				strings.TrimSuffix(pick(genVerbs), "ed"), pick(genNouns), pick(genAdvs))
			return s
		}
		return s + "."
	}
	for b.Len() < 120<<10 {
		switch k := r.intn(20); {
		case k < 8: // a paragraph of prose
			n := 2 + r.intn(5)
			for i := 0; i < n; i++ {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(sentence())
			}
			b.WriteString("\n\n")
		case k < 11: // dialogue
			q := pick(genQuestions)
			args := make([]any, strings.Count(q, "%s"))
			for i := range args {
				args[i] = pick(genNouns)
			}
			fmt.Fprintf(&b, "User: "+q+"\nAssistant: %s\n\n", append(args, sentence())...)
		case k < 13: // numbers
			a, c := r.intn(10000), r.intn(1000)
			fmt.Fprintf(&b, "%d + %d = %d; %d * %d = %d; %d.%02d%% of %d is about %.2f.\n", a, c, a+c, c, c%97, c*(c%97),
				r.intn(100), r.intn(100), a, float64(a)*float64(r.intn(100))/100)
			fmt.Fprintf(&b, "Order #%06d: %d x %s at $%d.%02d, shipped %04d-%02d-%02d %02d:%02d UTC, tel +%d %03d %04d\n",
				r.intn(1000000), 1+r.intn(9), pick(genNouns), r.intn(500), r.intn(100), 1990+r.intn(40), 1+r.intn(12),
				1+r.intn(28), r.intn(24), r.intn(60), 1+r.intn(99), r.intn(1000), r.intn(10000))
		case k < 15: // CJK and other scripts
			fmt.Fprintf(&b, "%s %s %s\n", pick(genCJK), pick(genCJK), pick(genOther))
		case k < 16: // emoji
			fmt.Fprintf(&b, "%s %s the %s is %s %s%s\n", pick(genNames), pick(genEmoji), pick(genNouns), pick(genAdjs), pick(genEmoji), pick(genEmoji))
		case k < 18: // code-like lines
			id := pick(genIdents)
			fmt.Fprintf(&b, "if %s == nil || len(%s) > %d {\n\treturn fmt.Errorf(\"%s: %%w\", err)\n}\n", id, pick(genIdents), r.intn(4096), pick(genNouns))
			fmt.Fprintf(&b, "def %s_%s(x, y=%d):\n    return [v * %d for v in x if v %% 2 == 0]  # %s\n", pick(genVerbs), pick(genNouns), r.intn(64), r.intn(9), pick(genAdjs))
		default: // JSON and markup
			fmt.Fprintf(&b, "{\"name\": \"%s\", \"age\": %d, \"tags\": [\"%s\", \"%s\"], \"active\": %t}\n", pick(genNames), 18+r.intn(70), pick(genAdjs), pick(genNouns), r.intn(2) == 0)
			fmt.Fprintf(&b, "<li class=\"%s\"><a href=\"/%s/%d\">%s</a></li>\n## %s %s\n- [x] %s the %s\n", pick(genAdjs), pick(genNouns), r.intn(100), pick(genNames), pick(genAdjs), pick(genNouns), pick(genVerbs), pick(genNouns))
		}
	}
	return b.String()
}

// splitmix is SplitMix64, enough randomness for picking words.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *splitmix) intn(n int) int { return int(s.next() % uint64(n)) }
